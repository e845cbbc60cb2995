// Byte-pair-encoding model with the semantics of HF tokenizers' models::bpe: per-character
// initial symbols (with optional byte fallback to <0xXX> tokens and fused <unk>), then repeated
// merging of the lowest-ranked adjacent pair, leftmost first.
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/vocab.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

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

  const Vocab &vocab() const { return vocab_; }

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
  int32_t tokenToId(std::string_view token) const { return vocab_.find(token); }

  BpeOptions options_;
  Vocab vocab_;
  std::vector<MergeEntry> merges_;
  size_t mergeMask_ = 0;
  int32_t unkId_ = -1;
  std::array<int32_t, 256> byteIds_;
};

} // namespace kiln::rt
