// The token <-> id table every tokenizer model owns (BPE, WordPiece, Unigram): all token strings
// in one arena, an id-indexed table of their places, and an open-addressing hash index.
#pragma once

#include "runtime/base/status.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

// Token ids index dense tables (the offsets below, the tokenizer's per-id flags), so the largest
// id in a tokenizer.json sizes allocations: ids must stay below 2^24. The largest vocabularies
// hold about 256K tokens.
inline constexpr int64_t kTokenIdLimit = int64_t(1) << 24;

class Vocab {
public:
  // What a token string listed twice means for the id it had first.
  enum class Duplicates {
    kForgetEarlierId, // a JSON object (BPE, WordPiece vocab): the last key wins outright
    kKeepEarlierId,   // a list (Unigram): both ids keep the string, lookup gives the last
  };
  // `where` prefixes error messages ("tokenizer.json: model.vocab").
  static Result<Vocab> create(std::vector<std::pair<std::string, int64_t>> entries,
                              Duplicates duplicates, const std::string &where);

  int32_t find(std::string_view token) const; // -1 when absent
  bool hasId(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < offsets_.size() && offsets_[id].second >= 0;
  }
  std::string_view token(int32_t id) const; // empty when absent
  // One past the largest id.
  int32_t idLimit() const { return static_cast<int32_t>(offsets_.size()); }
  size_t size() const { return count_; }
  // Ids of the byte-fallback tokens "<0x00>" .. "<0xFF>" (-1 where absent), as BPE and Unigram
  // spell them.
  std::array<int32_t, 256> byteTokenIds() const;

private:
  void insert(std::string_view token, int32_t id, int32_t replaced);

  std::string arena_;                                 // all token strings back to back
  std::vector<std::pair<uint32_t, int32_t>> offsets_; // id -> (offset, length or -1)
  // Open addressing: (32-bit hash << 32) | (id + 1); 0 marks an empty slot. The hash bits reject
  // most probes without touching the token text (loading a 256k vocab is probe-bound).
  std::vector<uint64_t> table_;
  size_t tableMask_ = 0;
  size_t count_ = 0;
};

} // namespace kiln::rt
