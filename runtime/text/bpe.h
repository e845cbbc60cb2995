// Byte-pair-encoding model with the semantics of HF tokenizers' models::bpe: per-character
// initial symbols (with optional byte fallback to <0xXX> tokens and fused <unk>), then repeated
// merging of the lowest-ranked adjacent pair, leftmost first.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

// Token ids index dense tables (BpeModel's offsets, the tokenizer's per-id flags), so the largest
// id in a tokenizer.json sizes allocations: ids must stay below 2^24. The largest vocabularies
// hold about 256K tokens.
inline constexpr int64_t kTokenIdLimit = int64_t(1) << 24;

struct BpeOptions {
  std::string unkToken; // empty: no unknown token (unmappable characters are dropped)
  bool fuseUnk = false;
  bool byteFallback = false;
  bool ignoreMerges = false; // a piece that is itself in the vocab is one token (Llama-3)
  std::string continuingSubwordPrefix;
  std::string endOfWordSuffix;
};

class BpeModel {
public:
  // `where` prefixes error messages (e.g. "tokenizer.json").
  static Result<BpeModel> create(std::vector<std::pair<std::string, int64_t>> vocab,
                                 const std::vector<std::pair<std::string, std::string>> &merges,
                                 BpeOptions options, const std::string &where);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view piece, std::vector<int32_t> &out) const;

  int32_t tokenToId(std::string_view token) const; // -1 when absent
  bool hasId(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < offsets_.size() && offsets_[id].second >= 0;
  }
  std::string_view idToToken(int32_t id) const; // empty when absent
  // One past the largest id in the vocab.
  int32_t idLimit() const { return static_cast<int32_t>(offsets_.size()); }
  size_t size() const { return count_; }

private:
  struct MergeEntry {
    uint64_t key; // (left id << 32) | right id; ~0 marks an empty slot
    int32_t rank;
    int32_t newId;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len; // bytes of the piece it covers; 0 once merged into its left neighbour
  };
  const MergeEntry *findMerge(int32_t left, int32_t right) const;
  void initialSymbols(std::string_view piece, std::vector<Symbol> &syms) const;
  void mergeWord(std::string_view piece, std::vector<int32_t> &out) const;
  int32_t findInTable(std::string_view token) const;

  BpeOptions options_;
  std::string arena_;                                 // all token strings back to back
  std::vector<std::pair<uint32_t, int32_t>> offsets_; // id -> (offset, length or -1)
  // Open addressing: (32-bit hash << 32) | (id + 1); 0 marks an empty slot. The hash bits reject
  // most probes without touching the token text (loading a 256k vocab is probe-bound).
  std::vector<uint64_t> table_;
  size_t tableMask_ = 0;
  std::vector<MergeEntry> merges_;
  size_t mergeMask_ = 0;
  size_t count_ = 0;
  int32_t unkId_ = -1;
  int32_t byteIds_[256];
  std::string_view suffixView() const { return options_.endOfWordSuffix; }
};

} // namespace kiln::rt
