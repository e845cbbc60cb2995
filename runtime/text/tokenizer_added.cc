#include "runtime/text/tokenizer_added.h"

#include "runtime/text/normalizer.h"
#include "runtime/text/tokenizer_utf8.h"

#include <unicode/uchar.h>

namespace kiln::rt {
namespace {

// Rust regex `\w` (Unicode): Alphabetic, marks, decimal numbers, connector punctuation,
// Join_Control.
bool isWordChar(char32_t c) {
  auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL))
    return true;
  int32_t mask = U_GET_GC_MASK(cp);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

char32_t lastChar(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80)
    --start;
  return utf8::next(s, start);
}

// Start of the trailing whitespace run of s (s.size() when none).
size_t trailingSpaceStart(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80)
      --start;
    size_t pos = start;
    if (!utf8::isWhitespace(utf8::next(s, pos)))
      break;
    end = start;
  }
  return end;
}

size_t leadingSpaceLength(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!utf8::isWhitespace(utf8::next(s, next)))
      break;
    pos = next;
  }
  return pos;
}

} // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty())
    return;
  int32_t node = 0;
  for (char ch : pattern) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
    auto it = edges.find(key);
    if (it == edges.end()) {
      nodes.push_back(Node{});
      it = edges.emplace(key, static_cast<int32_t>(nodes.size() - 1)).first;
    }
    node = it->second;
  }
  nodes[node].token = token;
  first[static_cast<uint8_t>(pattern[0])] = true;
}

int32_t AddedVocabulary::Trie::longestAt(std::string_view text, size_t pos, size_t &end) const {
  int32_t node = 0, found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges.end())
      break;
    node = it->second;
    if (nodes[node].token >= 0) {
      found = nodes[node].token;
      end = i + 1;
    }
  }
  return found;
}

void AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer &normalizer) {
  tokens_ = std::move(tokens);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken &t = tokens_[i];
    byId_[t.id] = i;
    byContent_[t.content] = t.id;
    if (t.normalized) {
      std::string pattern = t.content;
      normalizer.apply(pattern);
      normalized_.insert(pattern, static_cast<int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

const AddedToken *AddedVocabulary::byId(int32_t id) const {
  auto it = byId_.find(id);
  return it == byId_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::idOf(std::string_view content) const {
  auto it = byContent_.find(std::string(content));
  return it == byContent_.end() ? -1 : it->second;
}

void AddedVocabulary::split(std::string_view text, bool normalizedSet,
                            std::vector<Split> &out) const {
  out.clear();
  if (text.empty())
    return;
  const Trie &trie = normalizedSet ? normalized_ : raw_;
  size_t startOffset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t stop = 0;
    int32_t index = trie.longestAt(text, pos, stop);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    pos = stop; // the matcher resumes after this match even when it is discarded below
    const AddedToken &t = tokens_[index];
    if (t.singleWord) {
      bool startSpace = start == 0 || !isWordChar(lastChar(text.substr(0, start)));
      size_t next = stop;
      bool stopSpace = stop == text.size() || !isWordChar(utf8::next(text, next));
      if (!startSpace || !stopSpace)
        continue;
    }
    if (t.lstrip)
      start = std::max(trailingSpaceStart(text.substr(0, start)), startOffset);
    if (t.rstrip)
      stop += leadingSpaceLength(text.substr(stop));
    if (startOffset < start)
      out.push_back({startOffset, start, -1});
    out.push_back({start, stop, t.id});
    startOffset = stop;
    pos = std::max(pos, stop);
  }
  if (startOffset != text.size())
    out.push_back({startOffset, text.size(), -1});
}

} // namespace kiln::rt
