#include "runtime/kv/kv_cache_manager.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace kiln::rt {

int32_t peakBlocksOfSequence(const KvCacheConfig &config, int32_t numTokens, int32_t maxChunk) {
  const int32_t bs = config.blockSize;
  const int32_t all = (numTokens + bs - 1) / bs;
  if (config.groupWindows.empty())
    return all;
  int32_t peak = 0;
  for (int32_t window : config.groupWindows) {
    // A step computing [s, s + T) holds blocks floor((s - W + 1) / bs) .. ceil((s + T) / bs) - 1.
    const int32_t held = window > 0 ? (window - 1 + maxChunk + bs - 1) / bs + 1 : all;
    peak += std::min(all, held);
  }
  return peak;
}

KvCacheManager::KvCacheManager(const KvCacheConfig &config)
    : config_(config), windows_(config.groupWindows), pool_(config.numBlocks) {
  if (windows_.empty())
    windows_ = {0};
}

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
  for (int32_t window : config.groupWindows)
    if (window < 0)
      return invalidArgument("KvCacheConfig.groupWindows holds " + std::to_string(window) +
                             "; a window must be >= 0 (0: full attention)");
  return KvCacheManager(config);
}

int32_t KvCacheManager::blocksForTokens(int32_t numTokens) const {
  return (numTokens + config_.blockSize - 1) / config_.blockSize;
}

bool KvCacheManager::windowsCached(const std::vector<std::vector<int32_t>> &runs, int32_t n) const {
  for (int32_t g = 0; g < numGroups(); ++g) {
    if (windows_[g] == 0)
      continue;
    const int32_t needed =
        n - firstBlockInWindow(windows_[g], n * config_.blockSize, config_.blockSize);
    if (runs[g][n - 1] < needed)
      return false;
  }
  return true;
}

PrefixHit KvCacheManager::hitOf(const std::vector<BlockHash> &hashes, int32_t n) const {
  PrefixHit hit;
  hit.hashes.assign(hashes.begin(), hashes.begin() + n);
  hit.numTokens = n * config_.blockSize;
  hit.blocks.assign(numGroups(), std::vector<int32_t>(n, kNoKvBlock));
  for (int32_t g = 0; g < numGroups(); ++g)
    for (int32_t i = firstBlockInWindow(windows_[g], hit.numTokens, config_.blockSize); i < n; ++i)
      hit.blocks[g][i] = *pool_.findCached(groupBlockHash(hashes[i], g));
  return hit;
}

PrefixHit KvCacheManager::findCachedPrefix(std::span<const int32_t> tokenIds) const {
  if (!config_.enablePrefixCaching || tokenIds.empty())
    return {};
  const int32_t bs = config_.blockSize;
  const int32_t maxBlocks = static_cast<int32_t>((tokenIds.size() - 1) / bs);
  // Chained hashes while every full-attention group caches the whole prefix; per sliding group,
  // the run of cached blocks ending at each block.
  std::vector<BlockHash> hashes;
  std::vector<std::vector<int32_t>> runs(numGroups());
  BlockHash parent = kRootBlockHash;
  for (int32_t i = 0; i < maxBlocks; ++i) {
    BlockHash h = hashBlock(parent, tokenIds.subspan(static_cast<size_t>(i) * bs, bs));
    bool fullGroupsHit = true;
    for (int32_t g = 0; g < numGroups(); ++g) {
      const bool cached = pool_.findCached(groupBlockHash(h, g)).has_value();
      if (windows_[g] == 0)
        fullGroupsHit = fullGroupsHit && cached;
      else
        runs[g].push_back(cached ? (i > 0 ? runs[g][i - 1] : 0) + 1 : 0);
    }
    if (!fullGroupsHit)
      break;
    hashes.push_back(h);
    parent = h;
  }
  for (auto n = static_cast<int32_t>(hashes.size()); n > 0; --n)
    if (windowsCached(runs, n))
      return hitOf(hashes, n);
  return {};
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
  const bool empty = it == seqs_.end() || it->second.blocks[0].empty();
  const bool adopting = hit && hit->numTokens > 0 && empty;
  std::vector<int32_t> adopted;
  if (adopting)
    for (const std::vector<int32_t> &table : hit->blocks)
      for (int32_t block : table)
        if (block != kNoKvBlock)
          adopted.push_back(block);
  const int32_t have = adopting ? static_cast<int32_t>(hit->hashes.size())
                       : empty  ? 0
                                : static_cast<int32_t>(it->second.blocks[0].size());
  const int32_t perGroup = std::max(0, needBlocks - have);
  if (perGroup * numGroups() > numFreeAfterRetaining(adopted))
    return false;
  // Retain the hit first so allocating new blocks cannot evict it.
  KILN_RETURN_IF_ERROR(pool_.retain(adopted));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, pool_.allocate(perGroup * numGroups()));
  SeqBlocks &entry = seqs_[seq];
  entry.blocks.resize(numGroups());
  if (adopting) {
    entry.blocks = hit->blocks;
    entry.hashes.assign(hit->hashes.begin(), hit->hashes.end());
  }
  for (int32_t g = 0; g < numGroups(); ++g)
    entry.blocks[g].insert(entry.blocks[g].end(), fresh.begin() + g * perGroup,
                           fresh.begin() + (g + 1) * perGroup);
  return true;
}

Status KvCacheManager::dropBlocksBeforeWindow(SeqId seq, int32_t start) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return okStatus();
  std::vector<int32_t> dropped;
  for (int32_t g = 0; g < numGroups(); ++g) {
    std::vector<int32_t> &table = it->second.blocks[g];
    const int32_t first =
        std::min<int32_t>(firstBlockInWindow(windows_[g], start, config_.blockSize), table.size());
    for (int32_t i = 0; i < first; ++i)
      if (table[i] != kNoKvBlock)
        dropped.push_back(std::exchange(table[i], kNoKvBlock));
  }
  return pool_.release(dropped);
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
  const int32_t fullBlocks = std::min<int32_t>(std::min<int32_t>(numComputed, tokenIds.size()) / bs,
                                               entry.blocks[0].size());
  for (int32_t i = static_cast<int32_t>(entry.hashes.size()); i < fullBlocks; ++i) {
    BlockHash parent = i == 0 ? kRootBlockHash : entry.hashes[i - 1];
    BlockHash h = hashBlock(parent, tokenIds.subspan(static_cast<size_t>(i) * bs, bs));
    entry.hashes.push_back(h);
    // A false return means another block already caches this content; ours stays private.
    for (int32_t g = 0; g < numGroups(); ++g)
      if (entry.blocks[g][i] != kNoKvBlock)
        pool_.markCached(entry.blocks[g][i], groupBlockHash(h, g));
  }
  return okStatus();
}

Result<int32_t> KvCacheManager::forkFullBlocks(SeqId parent, SeqId child, int32_t numTokens) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end())
    return failedPrecondition("KV fork from unknown sequence " + std::to_string(parent));
  if (auto c = seqs_.find(child); c != seqs_.end() && !c->second.blocks[0].empty())
    return failedPrecondition("KV fork into sequence " + std::to_string(child) +
                              " that already has blocks");
  const SeqBlocks &from = it->second;
  int32_t shared =
      std::min<int32_t>(numTokens / config_.blockSize, static_cast<int32_t>(from.blocks[0].size()));
  // The child computes from block `shared` on: its first window must still be there.
  for (int32_t g = 0; g < numGroups(); ++g)
    for (int32_t i = firstBlockInWindow(windows_[g], shared * config_.blockSize, config_.blockSize);
         i < shared; ++i)
      if (from.blocks[g][i] == kNoKvBlock)
        shared = 0;
  SeqBlocks entry;
  std::vector<int32_t> retained;
  for (const std::vector<int32_t> &table : from.blocks) {
    entry.blocks.emplace_back(table.begin(), table.begin() + shared);
    std::copy_if(table.begin(), table.begin() + shared, std::back_inserter(retained),
                 [](int32_t block) { return block != kNoKvBlock; });
  }
  entry.hashes.assign(from.hashes.begin(),
                      from.hashes.begin() + std::min<size_t>(shared, from.hashes.size()));
  KILN_RETURN_IF_ERROR(pool_.retain(retained));
  seqs_[child] = std::move(entry);
  return shared * config_.blockSize;
}

Status KvCacheManager::freeSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return okStatus();
  // Tail blocks first, so the prefix stays cached longest.
  std::vector<int32_t> reversed;
  const std::vector<std::vector<int32_t>> &tables = it->second.blocks;
  for (auto i = static_cast<int32_t>(tables[0].size()) - 1; i >= 0; --i)
    for (const std::vector<int32_t> &table : tables)
      if (table[i] != kNoKvBlock)
        reversed.push_back(table[i]);
  seqs_.erase(it);
  return pool_.release(reversed);
}

const std::vector<int32_t> &KvCacheManager::blockTable(SeqId seq, int32_t group) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks[group];
}

const std::vector<std::vector<int32_t>> &KvCacheManager::blockTables(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it != seqs_.end())
    return it->second.blocks;
  static const std::vector<std::vector<int32_t>> kNone;
  return kNone;
}

} // namespace kiln::rt
