#include "runtime/text/bpe.h"

#include "runtime/base/hash.h"

#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_utf8.h"

#include <algorithm>

namespace kiln::rt {
namespace {

constexpr uint64_t kEmptyKey = ~uint64_t{0};

size_t tableSizeFor(size_t n) {
  size_t size = 16;
  while (size < n * 2)
    size <<= 1;
  return size;
}

struct PendingMerge {
  int32_t rank;
  int32_t pos;
  int32_t newId;
  // std heap is a max-heap: "greater" means lower rank, then lower position.
  bool operator<(const PendingMerge &o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

} // namespace

Result<BpeModel> BpeModel::create(std::vector<std::pair<std::string, int64_t>> vocab,
                                  const std::vector<std::pair<std::string, std::string>> &merges,
                                  BpeOptions options, const std::string &where) {
  BpeModel m;
  m.options_ = std::move(options);
  KILN_ASSIGN_OR_RETURN(m.vocab_,
                        Vocab::create(std::move(vocab), Vocab::Duplicates::kForgetEarlierId,
                                      where + ": model.vocab"));

  m.mergeMask_ = tableSizeFor(merges.size()) - 1;
  m.merges_.assign(m.mergeMask_ + 1, MergeEntry{kEmptyKey, 0, 0});
  size_t prefixLen = m.options_.continuingSubwordPrefix.size();
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto &[a, b] = merges[rank];
    int32_t aId = m.tokenToId(a), bId = m.tokenToId(b);
    merged.assign(a);
    if (b.size() >= prefixLen)
      merged.append(b, prefixLen, std::string::npos);
    int32_t newId = m.tokenToId(merged);
    if (aId < 0 || bId < 0 || newId < 0) {
      const std::string &missing = aId < 0 ? a : bId < 0 ? b : merged;
      return invalidArgument(where + ": model.merges[" + std::to_string(rank) + "] uses '" +
                             missing + "', which is not in model.vocab");
    }
    uint64_t key = (static_cast<uint64_t>(aId) << 32) | static_cast<uint32_t>(bId);
    size_t slot = mix64(key) & m.mergeMask_;
    while (m.merges_[slot].key != kEmptyKey && m.merges_[slot].key != key)
      slot = (slot + 1) & m.mergeMask_;
    // A repeated pair takes its last rank, as HF collects merges into a map.
    m.merges_[slot] = MergeEntry{key, static_cast<int32_t>(rank), newId};
  }

  if (!m.options_.unkToken.empty()) {
    m.unkId_ = m.tokenToId(m.options_.unkToken);
    if (m.unkId_ < 0)
      return invalidArgument(where + ": model.unk_token '" + m.options_.unkToken +
                             "' is not in model.vocab");
  }
  m.byteIds_ = m.vocab_.byteTokenIds();
  return m;
}

const BpeModel::MergeEntry *BpeModel::findMerge(int32_t left, int32_t right) const {
  uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  size_t slot = mix64(key) & mergeMask_;
  while (true) {
    const MergeEntry &e = merges_[slot];
    if (e.key == key)
      return &e;
    if (e.key == kEmptyKey)
      return nullptr;
    slot = (slot + 1) & mergeMask_;
  }
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t> &out) const {
  if (piece.empty())
    return;
  if (options_.ignoreMerges) {
    int32_t id = tokenToId(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  mergeWord(piece, out);
}

// HF BPE::merge_word: one symbol per character (decorated with the subword prefix / word suffix),
// falling back to <0xXX> byte tokens, then to a (fused) unknown token.
void BpeModel::initialSymbols(std::string_view piece, std::vector<Symbol> &syms) const {
  thread_local std::string key;
  syms.clear();
  auto add = [&](int32_t id, uint32_t len) {
    int32_t index = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, index - 1, -1, len});
    if (index > 0)
      syms[index - 1].next = index;
  };
  int32_t unkId = -1;
  uint32_t unkLen = 0;
  const std::string &prefix = options_.continuingSubwordPrefix;
  const std::string &suffix = options_.endOfWordSuffix;
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t start = pos;
    pos = std::min(piece.size(), pos + utf8::seqLength(static_cast<uint8_t>(piece[pos])));
    auto len = static_cast<uint32_t>(pos - start);
    std::string_view s = piece.substr(start, len);
    bool decorate = (!prefix.empty() && start != 0) || (!suffix.empty() && pos == piece.size());
    if (decorate) {
      key.assign(start != 0 ? prefix : std::string());
      key.append(s);
      if (pos == piece.size())
        key.append(suffix);
      s = key;
    }
    int32_t id = tokenToId(s);
    if (id >= 0) {
      if (unkId >= 0) {
        add(unkId, unkLen);
        unkId = -1;
      }
      add(id, len);
      continue;
    }
    if (options_.byteFallback) {
      bool all = std::all_of(s.begin(), s.end(),
                             [&](char c) { return byteIds_[static_cast<uint8_t>(c)] >= 0; });
      if (all) {
        // HF adds the byte tokens before flushing a pending <unk>; keep that order.
        for (char c : s)
          add(byteIds_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unkId_ >= 0) {
      if (unkId >= 0 && options_.fuseUnk) {
        unkLen += len;
      } else {
        if (unkId >= 0)
          add(unkId, unkLen);
        unkId = unkId_;
        unkLen = len;
      }
    }
  }
  if (unkId >= 0)
    add(unkId, unkLen);
}

void BpeModel::mergeWord(std::string_view piece, std::vector<int32_t> &out) const {
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<PendingMerge> heap;
  ScratchGuard keepSyms(syms);
  ScratchGuard keepHeap(heap);
  initialSymbols(piece, syms);
  heap.clear();
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const MergeEntry *m = findMerge(syms[i].id, syms[i + 1].id))
      heap.push_back({m->rank, static_cast<int32_t>(i), m->newId});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    PendingMerge top = heap.back();
    heap.pop_back();
    Symbol &left = syms[top.pos];
    if (left.len == 0 || left.next < 0)
      continue;
    Symbol &right = syms[left.next];
    const MergeEntry *m = findMerge(left.id, right.id);
    if (m == nullptr || m->newId != top.newId)
      continue;
    left.id = top.newId;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0)
      syms[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeEntry *pm = findMerge(syms[left.prev].id, left.id)) {
        heap.push_back({pm->rank, left.prev, pm->newId});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      if (const MergeEntry *nm = findMerge(left.id, syms[left.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->newId});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next)
    out.push_back(syms[i].id);
}

} // namespace kiln::rt
