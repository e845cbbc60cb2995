// Per-sequence block tables over a BlockPool, with automatic prefix caching and block sharing for
// parallel samples.
//
// Sharing rule: only FULL, already computed blocks are ever shared (prefix-cache hits and forks
// alike), and a sequence only writes positions at or after its computed length, which lie in
// blocks it owns alone. So no shared block is ever written and no block copy is needed: a forked
// sample re-computes the prompt's partial last block (fewer than blockSize tokens) into a block of
// its own instead of copying it. This keeps StepBatch free of a block-copy list.
//
// KV cache groups (plan.fbs "KV cache groups"): a sequence has one block table per group, all drawn
// from the one pool. In a sliding-window group, dropBlocksBeforeWindow gives back the blocks the
// sequence's next tokens can no longer read (their entries become kNoKvBlock), so a long sequence
// holds about W / blockSize blocks there. A prefix-cache hit or a fork must bring, in every group,
// the blocks the sequence's next token reads: all of them in a full-attention group, those of the
// last window in a sliding one (each group caches its own copy: groupBlockHash).
#pragma once

#include "runtime/base/status.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/kv_window.h"

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
  // Per KV cache group: its sliding window, 0 for full attention (RunnerLimits::kvGroupWindows).
  // Empty: one full-attention group.
  std::vector<int32_t> groupWindows;
};

// The most blocks one sequence of `numTokens` tokens holds at once, over all groups, when steps
// compute at most `maxChunk` of its tokens: what the pool must have for it to finish alone.
int32_t peakBlocksOfSequence(const KvCacheConfig &config, int32_t numTokens, int32_t maxChunk);

// Cached full blocks that prefix a token sequence.
struct PrefixHit {
  std::vector<std::vector<int32_t>> blocks; // per group; kNoKvBlock before a sliding window
  std::vector<BlockHash> hashes;
  int32_t numTokens = 0; // hashes.size() * blockSize
};

class KvCacheManager {
public:
  static Result<KvCacheManager> create(const KvCacheConfig &config);

  const KvCacheConfig &config() const { return config_; }
  const BlockPool &pool() const { return pool_; }
  int32_t blockSize() const { return config_.blockSize; }
  int32_t blocksForTokens(int32_t numTokens) const;
  int32_t numGroups() const { return static_cast<int32_t>(windows_.size()); }

  // Longest run of cached full blocks prefixing `tokenIds`. Never covers the last token, so a
  // sequence always computes at least one token and gets logits. Changes nothing.
  PrefixHit findCachedPrefix(std::span<const int32_t> tokenIds) const;

  // Grows `seq`'s block table to cover `numTokens` positions. A sequence without blocks first
  // adopts `hit` (a findCachedPrefix result taken just before). Returns false, changing nothing,
  // when the pool lacks free blocks; an error when numTokens exceeds maxBlocksPerSeq blocks.
  Result<bool> allocateSlots(SeqId seq, int32_t numTokens, const PrefixHit *hit = nullptr);
  // Gives back `seq`'s blocks that tokens from position `start` on never read (those before each
  // sliding window); call before allocateSlots for the step that computes from `start`.
  Status dropBlocksBeforeWindow(SeqId seq, int32_t start);

  // Publishes the full blocks of tokenIds[0, numComputed) to the prefix cache. Call after the
  // runner has written them, so a hit never reads a block still being computed.
  Status commitComputed(SeqId seq, std::span<const int32_t> tokenIds, int32_t numComputed);

  // Makes `child` share `parent`'s blocks for the first numTokens / blockSize full blocks (the
  // partial tail is not shared; see the header comment), or none when the parent no longer holds
  // a block of the child's first window. Returns the number of shared tokens.
  Result<int32_t> forkFullBlocks(SeqId parent, SeqId child, int32_t numTokens);

  // Drops the sequence's references, tail block first, so its least shareable blocks are evicted
  // before its prefix.
  Status freeSequence(SeqId seq);

  bool hasSequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  // Group `group`'s table; empty for an unknown sequence.
  const std::vector<int32_t> &blockTable(SeqId seq, int32_t group = 0) const;
  // Every group's table, in group order; empty for an unknown sequence.
  const std::vector<std::vector<int32_t>> &blockTables(SeqId seq) const;
  int32_t numSequences() const { return static_cast<int32_t>(seqs_.size()); }

private:
  struct SeqBlocks {
    std::vector<std::vector<int32_t>> blocks; // per group, all of one length
    std::vector<BlockHash> hashes;            // chained hashes of blocks[0, hashes.size())
  };

  explicit KvCacheManager(const KvCacheConfig &config);
  int32_t numFreeAfterRetaining(std::span<const int32_t> blocks) const;
  // Whether every sliding-window group caches the blocks the token after the first n blocks
  // (hashes[0, n)) reads; runs[g][i]: cached blocks of group g ending at block i.
  bool windowsCached(const std::vector<std::vector<int32_t>> &runs, int32_t n) const;
  PrefixHit hitOf(const std::vector<BlockHash> &hashes, int32_t n) const;

  KvCacheConfig config_;
  std::vector<int32_t> windows_; // per group
  BlockPool pool_;
  std::unordered_map<SeqId, SeqBlocks> seqs_;
};

} // namespace kiln::rt
