// The pool of KV cache blocks: reference counts, a free queue in LRU order, and the index of cached
// (hashed, full) blocks. A block whose last reference is dropped keeps its hash and stays findable
// in the prefix cache until `allocate` takes it from the head of the free queue (lazy eviction), so
// "free" and "cached" are not exclusive: numFreeBlocks() counts both.
#pragma once

#include "runtime/base/status.h"
#include "runtime/kv/block_hash.h"

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

class BlockPool {
public:
  explicit BlockPool(int32_t numBlocks);

  int32_t numBlocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks with no reference, cached or not: what `allocate` can hand out.
  int32_t numFreeBlocks() const { return numFree_; }
  int32_t numUsedBlocks() const { return numBlocks() - numFree_; }
  int32_t numCachedBlocks() const { return static_cast<int32_t>(cached_.size()); }
  // Fraction of blocks referenced by some sequence, in [0, 1].
  double usage() const;

  // Takes `count` blocks (ref count 1) from the head of the free queue, least recently freed first.
  // A cached block taken this way is evicted: it loses its hash. Fails, taking nothing, when fewer
  // than `count` blocks are free.
  Result<std::vector<int32_t>> allocate(int32_t count);
  // Adds one reference to each block; a block at ref count 0 (cached, in the free queue) leaves it.
  Status retain(std::span<const int32_t> blockIds);
  // Drops one reference from each block, in the order given; a block reaching 0 joins the tail of
  // the free queue, so blocks released first are evicted first. Releasing a block with no
  // reference is a bug in the caller: it asserts in debug builds and returns an error otherwise,
  // leaving the count at 0.
  Status release(std::span<const int32_t> blockIds);

  // The block holding the full block with this chained hash, if still cached.
  std::optional<int32_t> findCached(BlockHash hash) const;
  // Records that `blockId` (referenced, full, computed) holds the block with this hash. Returns
  // false when the hash is already cached in another block (that one stays the canonical copy) or
  // when this block already has a hash.
  bool markCached(int32_t blockId, BlockHash hash);
  bool isCached(int32_t blockId) const;

  int32_t refCount(int32_t blockId) const;
  bool isValidBlock(int32_t blockId) const { return blockId >= 0 && blockId < numBlocks(); }
  // Block ids in the free queue from head (next evicted) to tail: for tests and debugging.
  std::vector<int32_t> freeQueue() const;

private:
  struct Block {
    int32_t refCount = 0;
    int32_t prev = -1; // free queue links, valid only while refCount == 0
    int32_t next = -1;
    std::optional<BlockHash> hash;
  };

  void pushFreeTail(int32_t id);
  void unlinkFree(int32_t id);

  std::vector<Block> blocks_;
  int32_t freeHead_ = -1;
  int32_t freeTail_ = -1;
  int32_t numFree_ = 0;
  std::unordered_map<BlockHash, int32_t> cached_;
};

} // namespace kiln::rt
