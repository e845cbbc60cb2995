#include "runtime/kv/block_pool.h"

#include <string>

namespace kiln::rt {

BlockPool::BlockPool(int32_t numBlocks) : blocks_(numBlocks > 0 ? numBlocks : 0) {
  for (int32_t id = 0; id < this->numBlocks(); ++id)
    pushFreeTail(id);
}

double BlockPool::usage() const {
  return numBlocks() ? static_cast<double>(numUsedBlocks()) / numBlocks() : 0.0;
}

void BlockPool::pushFreeTail(int32_t id) {
  Block &b = blocks_[id];
  b.prev = freeTail_;
  b.next = -1;
  if (freeTail_ >= 0)
    blocks_[freeTail_].next = id;
  else
    freeHead_ = id;
  freeTail_ = id;
  ++numFree_;
}

void BlockPool::unlinkFree(int32_t id) {
  Block &b = blocks_[id];
  if (b.prev >= 0)
    blocks_[b.prev].next = b.next;
  else
    freeHead_ = b.next;
  if (b.next >= 0)
    blocks_[b.next].prev = b.prev;
  else
    freeTail_ = b.prev;
  b.prev = b.next = -1;
  --numFree_;
}

Result<std::vector<int32_t>> BlockPool::allocate(int32_t count) {
  if (count < 0)
    return invalidArgument("BlockPool::allocate: negative block count " + std::to_string(count));
  if (count > numFree_)
    return resourceExhausted("KV block pool: " + std::to_string(count) + " blocks requested, " +
                             std::to_string(numFree_) + " of " + std::to_string(numBlocks()) +
                             " free");
  std::vector<int32_t> ids;
  ids.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    int32_t id = freeHead_;
    unlinkFree(id);
    Block &b = blocks_[id];
    if (b.hash) {
      cached_.erase(*b.hash);
      b.hash.reset();
    }
    b.refCount = 1;
    ids.push_back(id);
  }
  return ids;
}

Status BlockPool::retain(std::span<const int32_t> blockIds) {
  for (int32_t id : blockIds) {
    if (!isValidBlock(id))
      return invalidArgument("BlockPool::retain: block id " + std::to_string(id) + " outside [0, " +
                             std::to_string(numBlocks()) + ")");
  }
  for (int32_t id : blockIds) {
    Block &b = blocks_[id];
    if (b.refCount == 0)
      unlinkFree(id);
    ++b.refCount;
  }
  return okStatus();
}

Status BlockPool::release(std::span<const int32_t> blockIds) {
  Status status;
  for (int32_t id : blockIds) {
    if (!isValidBlock(id)) {
      status = invalidArgument("BlockPool::release: block id " + std::to_string(id) +
                               " outside [0, " + std::to_string(numBlocks()) + ")");
      continue;
    }
    Block &b = blocks_[id];
    assert(b.refCount > 0 && "BlockPool::release of a block with no reference");
    if (b.refCount <= 0) {
      status = internalError("BlockPool::release: block " + std::to_string(id) +
                             " has no reference (ref count would go negative)");
      continue;
    }
    if (--b.refCount == 0)
      pushFreeTail(id);
  }
  return status;
}

std::optional<int32_t> BlockPool::findCached(BlockHash hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end())
    return std::nullopt;
  return it->second;
}

bool BlockPool::markCached(int32_t blockId, BlockHash hash) {
  if (!isValidBlock(blockId) || blocks_[blockId].hash || cached_.count(hash))
    return false;
  blocks_[blockId].hash = hash;
  cached_.emplace(hash, blockId);
  return true;
}

bool BlockPool::isCached(int32_t blockId) const {
  return isValidBlock(blockId) && blocks_[blockId].hash.has_value();
}

int32_t BlockPool::refCount(int32_t blockId) const {
  return isValidBlock(blockId) ? blocks_[blockId].refCount : 0;
}

std::vector<int32_t> BlockPool::freeQueue() const {
  std::vector<int32_t> ids;
  for (int32_t id = freeHead_; id >= 0; id = blocks_[id].next)
    ids.push_back(id);
  return ids;
}

} // namespace kiln::rt
