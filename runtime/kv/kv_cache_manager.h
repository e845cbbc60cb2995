// Per-sequence block tables over a BlockPool, with automatic prefix caching and block sharing for
// parallel samples.
//
// Sharing rule: only FULL, already computed blocks are ever shared (prefix-cache hits and forks
// alike), and a sequence only writes positions at or after its computed length, which lie in
// blocks it owns alone. So no shared block is ever written and no block copy is needed: a forked
// sample re-computes the prompt's partial last block (fewer than blockSize tokens) into a block of
// its own instead of copying it. This keeps StepBatch free of a block-copy list.
#pragma once

#include "runtime/base/status.h"
#include "runtime/kv/block_pool.h"

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

using SeqId = int64_t;

struct KvCacheConfig {
  int32_t numBlocks = 0;
  int32_t blockSize = 0;       // tokens per block
  int32_t maxBlocksPerSeq = 0; // block table length limit of the runner
  bool enablePrefixCaching = true;
};

// Cached full blocks that prefix a token sequence.
struct PrefixHit {
  std::vector<int32_t> blocks;
  std::vector<BlockHash> hashes;
  int32_t numTokens = 0; // blocks.size() * blockSize
};

class KvCacheManager {
public:
  static Result<KvCacheManager> create(const KvCacheConfig &config);

  const KvCacheConfig &config() const { return config_; }
  const BlockPool &pool() const { return pool_; }
  int32_t blockSize() const { return config_.blockSize; }
  int32_t blocksForTokens(int32_t numTokens) const;

  // Longest run of cached full blocks prefixing `tokenIds`. Never covers the last token, so a
  // sequence always computes at least one token and gets logits. Changes nothing.
  PrefixHit findCachedPrefix(std::span<const int32_t> tokenIds) const;

  // Grows `seq`'s block table to cover `numTokens` positions. A sequence without blocks first
  // adopts `hit` (a findCachedPrefix result taken just before). Returns false, changing nothing,
  // when the pool lacks free blocks; an error when numTokens exceeds maxBlocksPerSeq blocks.
  Result<bool> allocateSlots(SeqId seq, int32_t numTokens, const PrefixHit *hit = nullptr);

  // Publishes the full blocks of tokenIds[0, numComputed) to the prefix cache. Call after the
  // runner has written them, so a hit never reads a block still being computed.
  Status commitComputed(SeqId seq, std::span<const int32_t> tokenIds, int32_t numComputed);

  // Makes `child` share `parent`'s blocks for the first numTokens / blockSize full blocks (the
  // partial tail is not shared; see the header comment). Returns the number of shared tokens.
  Result<int32_t> forkFullBlocks(SeqId parent, SeqId child, int32_t numTokens);

  // Drops the sequence's references, tail block first, so its least shareable blocks are evicted
  // before its prefix.
  Status freeSequence(SeqId seq);

  bool hasSequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  // Empty for an unknown sequence.
  const std::vector<int32_t> &blockTable(SeqId seq) const;
  int32_t numSequences() const { return static_cast<int32_t>(seqs_.size()); }

private:
  struct SeqBlocks {
    std::vector<int32_t> blocks;
    std::vector<BlockHash> hashes; // chained hashes of blocks[0, hashes.size())
  };

  explicit KvCacheManager(const KvCacheConfig &config) : config_(config), pool_(config.numBlocks) {}
  int32_t numFreeAfterRetaining(std::span<const int32_t> blocks) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<SeqId, SeqBlocks> seqs_;
};

} // namespace kiln::rt
