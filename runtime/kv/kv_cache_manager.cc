#include "runtime/kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

namespace kiln::rt {

Result<KvCacheManager> KvCacheManager::create(const KvCacheConfig &config) {
  if (config.numBlocks <= 0)
    return invalidArgument("KvCacheConfig.numBlocks must be > 0, got " +
                           std::to_string(config.numBlocks));
  if (config.blockSize <= 0)
    return invalidArgument("KvCacheConfig.blockSize must be > 0, got " +
                           std::to_string(config.blockSize));
  if (config.maxBlocksPerSeq <= 0)
    return invalidArgument("KvCacheConfig.maxBlocksPerSeq must be > 0, got " +
                           std::to_string(config.maxBlocksPerSeq));
  return KvCacheManager(config);
}

int32_t KvCacheManager::blocksForTokens(int32_t numTokens) const {
  return (numTokens + config_.blockSize - 1) / config_.blockSize;
}

PrefixHit KvCacheManager::findCachedPrefix(std::span<const int32_t> tokenIds) const {
  PrefixHit hit;
  if (!config_.enablePrefixCaching || tokenIds.empty())
    return hit;
  const int32_t bs = config_.blockSize;
  const int32_t maxBlocks = static_cast<int32_t>((tokenIds.size() - 1) / bs);
  BlockHash parent = kRootBlockHash;
  for (int32_t i = 0; i < maxBlocks; ++i) {
    BlockHash h = hashBlock(parent, tokenIds.subspan(static_cast<size_t>(i) * bs, bs));
    std::optional<int32_t> block = pool_.findCached(h);
    if (!block)
      break;
    hit.blocks.push_back(*block);
    hit.hashes.push_back(h);
    parent = h;
  }
  hit.numTokens = static_cast<int32_t>(hit.blocks.size()) * bs;
  return hit;
}

int32_t KvCacheManager::numFreeAfterRetaining(std::span<const int32_t> blocks) const {
  int32_t free = pool_.numFreeBlocks();
  for (int32_t id : blocks)
    free -= pool_.refCount(id) == 0 ? 1 : 0;
  return free;
}

Result<bool> KvCacheManager::allocateSlots(SeqId seq, int32_t numTokens, const PrefixHit *hit) {
  const int32_t needBlocks = blocksForTokens(numTokens);
  if (needBlocks > config_.maxBlocksPerSeq)
    return outOfRange("sequence needs " + std::to_string(needBlocks) + " KV blocks for " +
                      std::to_string(numTokens) + " tokens; maxBlocksPerSeq is " +
                      std::to_string(config_.maxBlocksPerSeq));
  auto it = seqs_.find(seq);
  const bool adopting =
      hit && !hit->blocks.empty() && (it == seqs_.end() || it->second.blocks.empty());
  std::span<const int32_t> adopted =
      adopting ? std::span<const int32_t>(hit->blocks) : std::span<const int32_t>();
  const int32_t have = (it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size())) +
                       static_cast<int32_t>(adopted.size());
  const int32_t newBlocks = std::max(0, needBlocks - have);
  if (newBlocks > numFreeAfterRetaining(adopted))
    return false;
  // Retain the hit first so allocating new blocks cannot evict it.
  KILN_RETURN_IF_ERROR(pool_.retain(adopted));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, pool_.allocate(newBlocks));
  SeqBlocks &entry = seqs_[seq];
  if (adopting) {
    entry.blocks.assign(hit->blocks.begin(), hit->blocks.end());
    entry.hashes.assign(hit->hashes.begin(), hit->hashes.end());
  }
  entry.blocks.insert(entry.blocks.end(), fresh.begin(), fresh.end());
  return true;
}

Status KvCacheManager::commitComputed(SeqId seq, std::span<const int32_t> tokenIds,
                                      int32_t numComputed) {
  if (!config_.enablePrefixCaching)
    return okStatus();
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return failedPrecondition("KV commit for unknown sequence " + std::to_string(seq));
  SeqBlocks &entry = it->second;
  const int32_t bs = config_.blockSize;
  const int32_t fullBlocks =
      std::min<int32_t>(std::min<int32_t>(numComputed, tokenIds.size()) / bs, entry.blocks.size());
  for (int32_t i = static_cast<int32_t>(entry.hashes.size()); i < fullBlocks; ++i) {
    BlockHash parent = i == 0 ? kRootBlockHash : entry.hashes[i - 1];
    BlockHash h = hashBlock(parent, tokenIds.subspan(static_cast<size_t>(i) * bs, bs));
    entry.hashes.push_back(h);
    // A false return means another block already caches this content; ours stays private.
    pool_.markCached(entry.blocks[i], h);
  }
  return okStatus();
}

Result<int32_t> KvCacheManager::forkFullBlocks(SeqId parent, SeqId child, int32_t numTokens) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end())
    return failedPrecondition("KV fork from unknown sequence " + std::to_string(parent));
  if (seqs_.count(child) && !seqs_[child].blocks.empty())
    return failedPrecondition("KV fork into sequence " + std::to_string(child) +
                              " that already has blocks");
  const SeqBlocks &from = seqs_[parent];
  const int32_t shared =
      std::min<int32_t>(numTokens / config_.blockSize, static_cast<int32_t>(from.blocks.size()));
  SeqBlocks entry;
  entry.blocks.assign(from.blocks.begin(), from.blocks.begin() + shared);
  entry.hashes.assign(from.hashes.begin(),
                      from.hashes.begin() + std::min<size_t>(shared, from.hashes.size()));
  KILN_RETURN_IF_ERROR(pool_.retain(entry.blocks));
  seqs_[child] = std::move(entry);
  return shared * config_.blockSize;
}

Status KvCacheManager::freeSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return okStatus();
  std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  seqs_.erase(it);
  return pool_.release(reversed);
}

const std::vector<int32_t> &KvCacheManager::blockTable(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

} // namespace kiln::rt
