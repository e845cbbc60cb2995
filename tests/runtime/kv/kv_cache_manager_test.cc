#include "runtime/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kiln::rt {
namespace {

using Ids = std::vector<int32_t>;

KvCacheManager makeManager(int32_t blocks, int32_t blockSize, bool prefix = true,
                           int32_t maxBlocksPerSeq = 64) {
  Result<KvCacheManager> kv = KvCacheManager::create({blocks, blockSize, maxBlocksPerSeq, prefix});
  EXPECT_TRUE(kv.isOk()) << kv.status().toString();
  return std::move(kv).value();
}

Ids iota(int32_t n, int32_t from = 0) {
  Ids ids(n);
  std::iota(ids.begin(), ids.end(), from);
  return ids;
}

TEST(KvCacheManagerTest, CreateRejectsBadConfigNamingTheField) {
  Result<KvCacheManager> kv = KvCacheManager::create({0, 16, 8, true});
  ASSERT_FALSE(kv.isOk());
  EXPECT_NE(kv.status().message().find("numBlocks"), std::string::npos);
  EXPECT_FALSE(KvCacheManager::create({4, 0, 8, true}).isOk());
  EXPECT_FALSE(KvCacheManager::create({4, 16, 0, true}).isOk());
}

TEST(KvCacheManagerTest, AllocateSlotsGrowsTheTableBlockByBlock) {
  KvCacheManager kv = makeManager(8, 4);
  ASSERT_TRUE(*kv.allocateSlots(1, 5));
  EXPECT_EQ(kv.blockTable(1), (Ids{0, 1}));
  ASSERT_TRUE(*kv.allocateSlots(1, 8));
  EXPECT_EQ(kv.blockTable(1), (Ids{0, 1}));
  ASSERT_TRUE(*kv.allocateSlots(1, 9));
  EXPECT_EQ(kv.blockTable(1), (Ids{0, 1, 2}));
  EXPECT_EQ(kv.pool().numFreeBlocks(), 5);
}

TEST(KvCacheManagerTest, AllocateSlotsReportsAFullPoolWithoutChanges) {
  KvCacheManager kv = makeManager(3, 4);
  ASSERT_TRUE(*kv.allocateSlots(1, 8));
  Result<bool> more = kv.allocateSlots(2, 8);
  ASSERT_TRUE(more.isOk());
  EXPECT_FALSE(*more);
  EXPECT_TRUE(kv.blockTable(2).empty());
  EXPECT_EQ(kv.pool().numFreeBlocks(), 1);
}

TEST(KvCacheManagerTest, AllocateSlotsBeyondMaxBlocksPerSeqIsAnError) {
  KvCacheManager kv = makeManager(16, 4, true, 2);
  Result<bool> r = kv.allocateSlots(1, 9);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("maxBlocksPerSeq is 2"), std::string::npos);
}

TEST(KvCacheManagerTest, PrefixHitNeverCoversTheLastToken) {
  KvCacheManager kv = makeManager(8, 4);
  const Ids tokens = iota(8, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 8));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 8).isOk());
  // Same 8 tokens: the second block holds the last token, so only the first can hit.
  PrefixHit same = kv.findCachedPrefix(tokens);
  EXPECT_EQ(same.numTokens, 4);
  EXPECT_EQ(same.blocks[0], (Ids{0}));
  // One more token: both blocks hit.
  Ids longer = tokens;
  longer.push_back(7);
  PrefixHit hit = kv.findCachedPrefix(longer);
  EXPECT_EQ(hit.numTokens, 8);
  EXPECT_EQ(hit.blocks[0], (Ids{0, 1}));
}

TEST(KvCacheManagerTest, HashesAreChainedSoAMatchingLaterBlockAloneDoesNotHit) {
  KvCacheManager kv = makeManager(8, 4);
  const Ids tokens = iota(9, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 9));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 9).isOk());
  Ids other = tokens;
  other[0] = 5; // first block differs, second identical
  EXPECT_EQ(kv.findCachedPrefix(other).numTokens, 0);
}

TEST(KvCacheManagerTest, OnlyComputedFullBlocksAreCommitted) {
  KvCacheManager kv = makeManager(8, 4);
  const Ids tokens = iota(12, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 12));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 7).isOk()); // block 1 is half computed
  EXPECT_EQ(kv.pool().numCachedBlocks(), 1);
  EXPECT_EQ(kv.findCachedPrefix(tokens).numTokens, 4);
  ASSERT_TRUE(kv.commitComputed(1, tokens, 12).isOk());
  EXPECT_EQ(kv.pool().numCachedBlocks(), 3);
  EXPECT_EQ(kv.findCachedPrefix(tokens).numTokens, 8);
}

TEST(KvCacheManagerTest, AdoptedHitIsSharedAndOutlivesItsFirstOwner) {
  KvCacheManager kv = makeManager(6, 4);
  const Ids tokens = iota(10, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 10));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 10).isOk());
  PrefixHit hit = kv.findCachedPrefix(tokens);
  ASSERT_EQ(hit.numTokens, 8);
  ASSERT_TRUE(*kv.allocateSlots(2, 10, &hit));
  EXPECT_EQ(kv.blockTable(2), (Ids{0, 1, 3}));
  EXPECT_EQ(kv.pool().refCount(0), 2);
  EXPECT_EQ(kv.pool().refCount(1), 2);
  EXPECT_EQ(kv.pool().numUsedBlocks(), 4);

  ASSERT_TRUE(kv.freeSequence(1).isOk());
  EXPECT_EQ(kv.pool().refCount(0), 1);
  EXPECT_EQ(kv.pool().refCount(2), 0);
  ASSERT_TRUE(kv.freeSequence(2).isOk());
  EXPECT_EQ(kv.pool().numFreeBlocks(), 6);
  // Still cached after both owners left; a third sequence hits without recomputing.
  EXPECT_EQ(kv.findCachedPrefix(tokens).numTokens, 8);
}

TEST(KvCacheManagerTest, FreeSequenceReleasesTailFirstSoThePrefixIsEvictedLast) {
  KvCacheManager kv = makeManager(3, 4);
  ASSERT_TRUE(*kv.allocateSlots(1, 12));
  ASSERT_TRUE(kv.freeSequence(1).isOk());
  EXPECT_EQ(kv.pool().freeQueue(), (Ids{2, 1, 0}));
}

TEST(KvCacheManagerTest, HitBlocksInTheFreeQueueCountAgainstTheFreeBudget) {
  KvCacheManager kv = makeManager(3, 4);
  const Ids tokens = iota(9, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 9));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 9).isOk());
  ASSERT_TRUE(kv.freeSequence(1).isOk());
  PrefixHit hit = kv.findCachedPrefix(tokens);
  ASSERT_EQ(hit.numTokens, 8);
  // 3 free blocks, 2 of them the hit: 13 tokens need 4 blocks, 2 new, only 1 left.
  EXPECT_FALSE(*kv.allocateSlots(2, 13, &hit));
  EXPECT_EQ(kv.pool().numFreeBlocks(), 3);
  ASSERT_TRUE(*kv.allocateSlots(2, 12, &hit));
  EXPECT_EQ(kv.blockTable(2), (Ids{0, 1, 2}));
}

TEST(KvCacheManagerTest, ForkSharesOnlyFullBlocks) {
  KvCacheManager kv = makeManager(8, 4, /*prefix=*/false);
  ASSERT_TRUE(*kv.allocateSlots(1, 10));
  Result<int32_t> shared = kv.forkFullBlocks(1, 2, 10);
  ASSERT_TRUE(shared.isOk());
  EXPECT_EQ(*shared, 8);
  EXPECT_EQ(kv.blockTable(2), (Ids{0, 1}));
  EXPECT_EQ(kv.pool().refCount(0), 2);
  EXPECT_EQ(kv.pool().refCount(2), 1) << "the partial block stays private to the parent";
  // The child computes the partial tail into a block of its own.
  ASSERT_TRUE(*kv.allocateSlots(2, 11));
  EXPECT_EQ(kv.blockTable(2), (Ids{0, 1, 3}));
  ASSERT_TRUE(kv.freeSequence(1).isOk());
  ASSERT_TRUE(kv.freeSequence(2).isOk());
  EXPECT_EQ(kv.pool().numFreeBlocks(), 8);
}

TEST(KvCacheManagerTest, DisabledPrefixCachingNeverHits) {
  KvCacheManager kv = makeManager(8, 4, /*prefix=*/false);
  const Ids tokens = iota(9, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 9));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 9).isOk());
  EXPECT_EQ(kv.findCachedPrefix(tokens).numTokens, 0);
  EXPECT_EQ(kv.pool().numCachedBlocks(), 0);
}

} // namespace
} // namespace kiln::rt
