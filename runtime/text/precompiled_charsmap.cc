#include "runtime/text/precompiled_charsmap.h"

#include "runtime/base/base64.h"

#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_utf8.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/utext.h>

namespace kiln::rt {
namespace {

// darts-clone unit fields (HF spm_precompiled reads them the same way).
bool hasLeaf(uint32_t unit) {
  return ((unit >> 8) & 1) == 1;
}
uint32_t value(uint32_t unit) {
  return unit & ((1u << 31) - 1);
}
uint32_t label(uint32_t unit) {
  return unit & ((1u << 31) | 0xFF);
}
uint32_t offset(uint32_t unit) {
  return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}

// The extended grapheme clusters of `text` as end offsets. ASCII needs no ICU: every byte is its
// own cluster except CR LF.
void clusterEnds(std::string_view text, std::vector<size_t> &ends) {
  ends.clear();
  bool ascii = true;
  for (char c : text)
    ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) {
    for (size_t i = 0; i < text.size(); ++i)
      if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n'))
        ends.push_back(i + 1);
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  thread_local std::unique_ptr<icu::BreakIterator> iterator(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
  UText *ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  if (iterator == nullptr || U_FAILURE(status)) {
    utext_close(ut);
    for (size_t pos = 0; pos < text.size();) // no ICU: one character per cluster
      ends.push_back(pos += utf8::seqLength(static_cast<uint8_t>(text[pos])));
    return;
  }
  iterator->setText(ut, status);
  for (int32_t end = iterator->next(); end != icu::BreakIterator::DONE; end = iterator->next())
    ends.push_back(static_cast<size_t>(end));
  utext_close(ut);
}

} // namespace

Result<std::shared_ptr<const PrecompiledCharsMap>>
PrecompiledCharsMap::fromBase64(std::string_view encoded, const std::string &where) {
  std::optional<std::string> blob = decodeBase64(encoded);
  if (!blob)
    return invalidArgument(where + " is not valid base64");
  return fromBytes(*blob, where);
}

Result<std::shared_ptr<const PrecompiledCharsMap>>
PrecompiledCharsMap::fromBytes(std::string_view blob, const std::string &where) {
  auto readU32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
      v = (v << 8) | static_cast<uint8_t>(blob[at + i]);
    return v;
  };
  if (blob.size() < 4)
    return invalidArgument(where + " is too short for its trie size");
  const uint32_t trieBytes = readU32(0);
  const size_t units = trieBytes / 4;
  if (units == 0 || blob.size() < 4 + units * 4)
    return invalidArgument(where + ": the trie size " + std::to_string(trieBytes) +
                           " does not fit in the charsmap (" + std::to_string(blob.size()) +
                           " bytes)");
  auto map = std::make_shared<PrecompiledCharsMap>();
  map->units_.resize(units);
  for (size_t i = 0; i < units; ++i)
    map->units_[i] = readU32(4 + i * 4);
  map->replacements_.assign(blob.substr(4 + units * 4));
  if (!utf8::isValid(map->replacements_))
    return invalidArgument(where + ": the replacement strings are not valid UTF-8");
  return std::shared_ptr<const PrecompiledCharsMap>(std::move(map));
}

std::optional<std::string_view> PrecompiledCharsMap::transform(std::string_view chunk) const {
  size_t node = offset(units_[0]);
  for (char ch : chunk) {
    auto c = static_cast<uint8_t>(ch);
    if (c == 0)
      break;
    node ^= c;
    if (node >= units_.size() || label(units_[node]) != c)
      return std::nullopt;
    const uint32_t unit = units_[node];
    node ^= offset(unit);
    if (!hasLeaf(unit))
      continue;
    if (node >= units_.size())
      return std::nullopt;
    size_t begin = value(units_[node]);
    if (begin > replacements_.size())
      return std::nullopt;
    size_t end = replacements_.find('\0', begin);
    return std::string_view(replacements_)
        .substr(begin, (end == std::string::npos ? replacements_.size() : end) - begin);
  }
  return std::nullopt;
}

void PrecompiledCharsMap::rewriteCluster(std::string_view cluster, std::string &out) const {
  if (cluster.size() < 6) {
    if (std::optional<std::string_view> whole = transform(cluster)) {
      out.append(*whole);
      return;
    }
  }
  for (size_t pos = 0; pos < cluster.size();) {
    size_t begin = pos;
    pos = std::min(cluster.size(), pos + utf8::seqLength(static_cast<uint8_t>(cluster[pos])));
    std::string_view c = cluster.substr(begin, pos - begin);
    std::optional<std::string_view> mapped = transform(c);
    out.append(mapped ? *mapped : c);
  }
}

void PrecompiledCharsMap::apply(std::string &text) const {
  thread_local std::vector<size_t> ends;
  ScratchGuard keepEnds(ends);
  clusterEnds(text, ends);
  std::string out;
  out.reserve(text.size());
  size_t begin = 0;
  for (size_t end : ends) {
    rewriteCluster(std::string_view(text).substr(begin, end - begin), out);
    begin = end;
  }
  text = std::move(out);
}

} // namespace kiln::rt
