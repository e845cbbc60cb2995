#include "runtime/text/unigram.h"

#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_utf8.h"

#include <algorithm>
#include <limits>

namespace kiln::rt {
namespace {

// HF's K_UNK_PENALTY: an unknown character scores this far below the worst piece.
constexpr double kUnknownPenalty = 10.0;

} // namespace

Result<UnigramModel> UnigramModel::create(std::vector<std::pair<std::string, double>> pieces,
                                          int64_t unkId, bool byteFallback,
                                          const std::string &where) {
  if (static_cast<int64_t>(pieces.size()) > kTokenIdLimit)
    return invalidArgument(where + ": model.vocab has more than 2^24 pieces");
  if (unkId >= 0 && pieces.empty())
    return invalidArgument(where + ": model.vocab is empty but model.unk_id is set");
  if (unkId >= static_cast<int64_t>(pieces.size()))
    return invalidArgument(where + ": model.unk_id " + std::to_string(unkId) +
                           " is not an id of model.vocab (" + std::to_string(pieces.size()) +
                           " pieces)");
  UnigramModel m;
  m.unkId_ = static_cast<int32_t>(std::max<int64_t>(unkId, -1));
  m.byteFallback_ = byteFallback;
  double minScore = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(pieces.size());
  m.scores_.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    entries.emplace_back(pieces[i].first, static_cast<int64_t>(i));
    m.scores_.push_back(pieces[i].second);
    minScore = std::min(minScore, pieces[i].second);
  }
  m.unkScore_ = minScore - kUnknownPenalty;
  KILN_ASSIGN_OR_RETURN(m.vocab_,
                        Vocab::create(std::move(entries), Vocab::Duplicates::kKeepEarlierId,
                                      where + ": model.vocab"));
  m.byteIds_ = m.vocab_.byteTokenIds();
  m.buildTrie(pieces);
  return m;
}

// Builds the trie breadth first from the sorted distinct pieces: each node covers a range of
// pieces sharing its prefix, and its children are the groups of that range by the next byte.
void UnigramModel::buildTrie(const std::vector<std::pair<std::string, double>> &pieces) {
  std::vector<std::string_view> keys;
  keys.reserve(pieces.size());
  for (const auto &p : pieces)
    if (!p.first.empty()) // HF's trie never reports the empty piece
      keys.push_back(p.first);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  struct Range {
    uint32_t node, lo, hi, depth;
  };
  trie_.assign(1, TrieNode{});
  std::vector<Range> pending{{0, 0, static_cast<uint32_t>(keys.size()), 0}};
  for (size_t next = 0; next < pending.size(); ++next) {
    Range r = pending[next];
    if (r.lo < r.hi && keys[r.lo].size() == r.depth)
      trie_[r.node].id = vocab_.find(keys[r.lo++]);
    trie_[r.node].firstChild = static_cast<uint32_t>(trie_.size());
    for (uint32_t i = r.lo; i < r.hi;) {
      auto byte = static_cast<uint8_t>(keys[i][r.depth]);
      uint32_t j = i;
      while (j < r.hi && static_cast<uint8_t>(keys[j][r.depth]) == byte)
        ++j;
      TrieNode node;
      node.byte = byte;
      pending.push_back({static_cast<uint32_t>(trie_.size()), i, j, r.depth + 1});
      trie_.push_back(node);
      ++trie_[r.node].childCount;
      i = j;
    }
  }
}

int32_t UnigramModel::child(int32_t node, uint8_t byte) const {
  const TrieNode &n = trie_[node];
  auto begin = trie_.begin() + n.firstChild, end = begin + n.childCount;
  auto it =
      std::lower_bound(begin, end, byte, [](const TrieNode &c, uint8_t b) { return c.byte < b; });
  return it != end && it->byte == byte ? static_cast<int32_t>(it - trie_.begin()) : -1;
}

// HF Unigram::encode_optimized: best[i] is the best path over piece[0, i). Pieces are tried
// shortest first and a later candidate must score strictly higher, which settles ties as HF does.
void UnigramModel::viterbi(std::string_view piece, std::vector<Best> &best) const {
  best.assign(piece.size() + 1, Best{});
  for (size_t start = 0; start < piece.size();) {
    const double here = best[start].score;
    const size_t charLen =
        std::min(utf8::seqLength(static_cast<uint8_t>(piece[start])), piece.size() - start);
    auto offer = [&](size_t end, double score, int32_t id) {
      Best &b = best[end];
      double candidate = score + here;
      if (b.start < 0 || candidate > b.score)
        b = Best{candidate, static_cast<int32_t>(start), id};
    };
    bool singleChar = false;
    int32_t node = 0;
    for (size_t pos = start; pos < piece.size(); ++pos) {
      node = child(node, static_cast<uint8_t>(piece[pos]));
      if (node < 0)
        break;
      if (trie_[node].id < 0)
        continue;
      offer(pos + 1, scores_[trie_[node].id], trie_[node].id);
      singleChar = singleChar || pos + 1 - start == charLen;
    }
    if (!singleChar)
      offer(start + charLen, unkScore_, unkId_); // unkId_ -1: dropped on output
    start += charLen;
  }
}

void UnigramModel::tokenize(std::string_view piece, std::vector<int32_t> &out) const {
  if (piece.empty())
    return;
  thread_local std::vector<Best> best;
  ScratchGuard keepBest(best);
  viterbi(piece, best);
  emit(piece, best, out);
}

// Walks the best path back to front; runs of unknown nodes become one token (HF's fuse_unk).
void UnigramModel::emit(std::string_view piece, const std::vector<Best> &best,
                        std::vector<int32_t> &out) const {
  thread_local std::vector<std::pair<uint32_t, uint32_t>> spans; // [begin, end), reversed
  ScratchGuard keepSpans(spans);
  spans.clear();
  size_t unkBegin = 0, unkEnd = 0; // pending fused unknown run
  for (size_t end = piece.size(); end > 0;) {
    const Best &b = best[end];
    auto start = static_cast<size_t>(b.start);
    if (b.id == unkId_) {
      if (unkEnd == 0)
        unkEnd = end;
      unkBegin = start;
    } else {
      if (unkEnd != 0)
        spans.emplace_back(unkBegin, unkEnd);
      unkEnd = 0;
      spans.emplace_back(start, end);
    }
    end = start;
  }
  if (unkEnd != 0)
    spans.emplace_back(unkBegin, unkEnd);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    std::string_view text = piece.substr(it->first, it->second - it->first);
    emitToken(text, vocab_.find(text), out);
  }
}

// HF Unigram::tokenize: a string the vocab lacks (a fused unknown run) becomes its <0xXX> bytes
// when byte fallback has them all, else the unknown token.
void UnigramModel::emitToken(std::string_view text, int32_t id, std::vector<int32_t> &out) const {
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  if (byteFallback_ && std::all_of(text.begin(), text.end(), [&](char c) {
        return byteIds_[static_cast<uint8_t>(c)] >= 0;
      })) {
    for (char c : text)
      out.push_back(byteIds_[static_cast<uint8_t>(c)]);
    return;
  }
  if (unkId_ >= 0)
    out.push_back(unkId_);
}

} // namespace kiln::rt
