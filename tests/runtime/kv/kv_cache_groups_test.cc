// KV cache groups (schema/plan.fbs "KV cache groups"): a full-attention group and a sliding-window
// group drawing from one pool. Window 4, blocks of 4 tokens: tokens from position p on read
// blocks from floor((p - 3) / 4) on.
#include "runtime/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kiln::rt {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t kNo = kNoKvBlock;

KvCacheManager makeGrouped(int32_t blocks, std::vector<int32_t> windows = {0, 4}) {
  Result<KvCacheManager> kv = KvCacheManager::create({blocks, 4, 16, true, std::move(windows)});
  EXPECT_TRUE(kv.isOk()) << kv.status().toString();
  return std::move(kv).value();
}

Ids iota(int32_t n, int32_t from = 0) {
  Ids ids(n);
  std::iota(ids.begin(), ids.end(), from);
  return ids;
}

int32_t heldBlocks(const Ids &table) {
  return static_cast<int32_t>(
      std::count_if(table.begin(), table.end(), [](int32_t b) { return b != kNoKvBlock; }));
}

TEST(KvCacheGroupsTest, EveryGroupGetsItsOwnBlocks) {
  KvCacheManager kv = makeGrouped(8);
  EXPECT_EQ(kv.numGroups(), 2);
  ASSERT_TRUE(*kv.allocateSlots(1, 5));
  EXPECT_EQ(kv.blockTable(1, 0), (Ids{0, 1}));
  EXPECT_EQ(kv.blockTable(1, 1), (Ids{2, 3}));
  EXPECT_EQ(kv.pool().numUsedBlocks(), 4);
  // 9 tokens need 3 blocks per group: 2 more, 6 in all.
  ASSERT_TRUE(*kv.allocateSlots(1, 9));
  EXPECT_EQ(kv.blockTable(1, 1), (Ids{2, 3, 5}));
  EXPECT_FALSE(*kv.allocateSlots(1, 17)) << "needs 2 x 2 more blocks, 2 are free";
  EXPECT_EQ(kv.pool().numUsedBlocks(), 6) << "a failed allocation takes nothing";
}

TEST(KvCacheGroupsTest, SlidingGroupGivesBackBlocksBeforeItsWindow) {
  KvCacheManager kv = makeGrouped(8);
  ASSERT_TRUE(*kv.allocateSlots(1, 8));
  // From position 7 on the window starts at 7 - 3 = 4: block 0 is never read again.
  ASSERT_TRUE(kv.dropBlocksBeforeWindow(1, 7).isOk());
  EXPECT_EQ(kv.blockTable(1, 1), (Ids{kNo, 3}));
  EXPECT_EQ(kv.blockTable(1, 0), (Ids{0, 1})) << "full attention keeps everything";
  EXPECT_EQ(kv.pool().numUsedBlocks(), 3);
  // Position 6 still reads position 3 (block 0): nothing more to drop at 6 in a fresh sequence.
  ASSERT_TRUE(*kv.allocateSlots(2, 8));
  ASSERT_TRUE(kv.dropBlocksBeforeWindow(2, 6).isOk());
  EXPECT_EQ(heldBlocks(kv.blockTable(2, 1)), 2);
  ASSERT_TRUE(kv.freeSequence(1).isOk());
  ASSERT_TRUE(kv.freeSequence(2).isOk());
  EXPECT_EQ(kv.pool().numFreeBlocks(), 8);
}

TEST(KvCacheGroupsTest, DecodingALongSequenceHoldsAWindowOfBlocks) {
  // 40 tokens: 10 blocks of full attention, at most 2 of the window, in a pool of 12.
  KvCacheManager kv = makeGrouped(12);
  const Ids tokens = iota(40, 10);
  ASSERT_TRUE(*kv.allocateSlots(1, 1));
  for (int32_t computed = 1; computed < 40; ++computed) {
    ASSERT_TRUE(kv.commitComputed(1, tokens, computed).isOk());
    ASSERT_TRUE(kv.dropBlocksBeforeWindow(1, computed).isOk());
    ASSERT_TRUE(*kv.allocateSlots(1, computed + 1)) << "at " << computed;
    EXPECT_LE(heldBlocks(kv.blockTable(1, 1)), 2) << "at " << computed;
  }
  EXPECT_EQ(kv.blockTable(1, 0).size(), 10u);
  EXPECT_EQ(kv.blockTable(1, 1).size(), 10u);
  EXPECT_EQ(heldBlocks(kv.blockTable(1, 1)), 1) << "position 39 reads block 9 only";
  EXPECT_EQ(kv.pool().numUsedBlocks(), 11);
}

TEST(KvCacheGroupsTest, PrefixHitBringsEachGroupsNeededBlocks) {
  KvCacheManager kv = makeGrouped(10);
  const Ids tokens = iota(13, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 12));
  ASSERT_TRUE(kv.commitComputed(1, tokens, 12).isOk());
  ASSERT_TRUE(kv.dropBlocksBeforeWindow(1, 12).isOk()); // window from 9: block 2 on
  const Ids window = kv.blockTable(1, 1);
  ASSERT_EQ(window, (Ids{kNo, kNo, 5}));
  // 13 tokens: 3 full blocks can hit; the next token (position 12) reads blocks 2.. only.
  PrefixHit hit = kv.findCachedPrefix(tokens);
  ASSERT_EQ(hit.numTokens, 12);
  EXPECT_EQ(hit.blocks[0], (Ids{0, 1, 2}));
  EXPECT_EQ(hit.blocks[1], (Ids{kNo, kNo, 5}));
  ASSERT_TRUE(*kv.allocateSlots(2, 13, &hit));
  EXPECT_EQ(kv.blockTable(2, 0), (Ids{0, 1, 2, 6}));
  EXPECT_EQ(kv.blockTable(2, 1), (Ids{kNo, kNo, 5, 7}));
  EXPECT_EQ(kv.pool().refCount(5), 2);
}

TEST(KvCacheGroupsTest, PrefixHitShrinksWhenAWindowBlockWasEvicted) {
  KvCacheManager kv = makeGrouped(8);
  const Ids tokens = iota(13, 100);
  ASSERT_TRUE(*kv.allocateSlots(1, 12)); // blocks 0-2 full, 3-5 window
  ASSERT_TRUE(kv.commitComputed(1, tokens, 12).isOk());
  ASSERT_TRUE(kv.dropBlocksBeforeWindow(1, 12).isOk()); // 3 and 4: free, still cached
  // Another sequence takes the 2 never-used blocks, then the two dropped ones (evicting them).
  ASSERT_TRUE(*kv.allocateSlots(2, 8));
  EXPECT_EQ(kv.pool().numFreeBlocks(), 0);
  // Position 12 reads window block 2 (held): 12 tokens still hit.
  EXPECT_EQ(kv.findCachedPrefix(tokens).numTokens, 12);
  // A 9-token prompt: position 8 reads window blocks 1.. (evicted), position 4 reads block 0..
  // (evicted): no hit, although the full-attention blocks are all cached.
  const Ids shorter(tokens.begin(), tokens.begin() + 9);
  EXPECT_EQ(kv.findCachedPrefix(shorter).numTokens, 0);
}

TEST(KvCacheGroupsTest, ForkSharesNothingWhenTheChildsWindowIsGone) {
  KvCacheManager kv = makeGrouped(16);
  ASSERT_TRUE(*kv.allocateSlots(1, 12));
  ASSERT_TRUE(kv.dropBlocksBeforeWindow(1, 12).isOk());
  // The child would compute from position 8, reading window block 1: dropped by the parent.
  Result<int32_t> shared = kv.forkFullBlocks(1, 2, 8);
  ASSERT_TRUE(shared.isOk());
  EXPECT_EQ(*shared, 0);
  // From position 12 on the child reads window block 2 only: all of the parent's 3 blocks shared.
  shared = kv.forkFullBlocks(1, 3, 12);
  ASSERT_TRUE(shared.isOk());
  EXPECT_EQ(*shared, 12);
  EXPECT_EQ(kv.blockTable(3, 1), (Ids{kNo, kNo, 5}));
  EXPECT_EQ(kv.pool().refCount(5), 2);
}

TEST(KvCacheGroupsTest, PeakBlocksOfASequence) {
  KvCacheConfig config{64, 4, 16, true, {0, 4}};
  // 40 tokens: 10 full blocks; the window group holds blocks of positions [p - 3, p + chunk).
  EXPECT_EQ(peakBlocksOfSequence(config, 40, 1), 10 + 2);
  EXPECT_EQ(peakBlocksOfSequence(config, 40, 8), 10 + 4);
  EXPECT_EQ(peakBlocksOfSequence(config, 5, 8), 2 + 2) << "never more than the whole sequence";
  config.groupWindows = {};
  EXPECT_EQ(peakBlocksOfSequence(config, 40, 8), 10);
  EXPECT_FALSE(KvCacheManager::create({8, 4, 16, true, {0, -1}}).isOk());
}

} // namespace
} // namespace kiln::rt
