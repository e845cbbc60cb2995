#include "runtime/kv/block_pool.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using Ids = std::vector<int32_t>;

TEST(BlockPoolTest, AllocatesFromTheHeadOfTheFreeQueue) {
  BlockPool pool(4);
  EXPECT_EQ(pool.numFreeBlocks(), 4);
  Result<Ids> a = pool.allocate(2);
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(*a, (Ids{0, 1}));
  EXPECT_EQ(pool.refCount(0), 1);
  EXPECT_EQ(pool.refCount(1), 1);
  EXPECT_EQ(pool.numFreeBlocks(), 2);
  EXPECT_EQ(pool.numUsedBlocks(), 2);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
  EXPECT_EQ(pool.freeQueue(), (Ids{2, 3}));
}

TEST(BlockPoolTest, ReleasedBlocksJoinTheTailInReleaseOrder) {
  BlockPool pool(4);
  ASSERT_TRUE(pool.allocate(4).isOk());
  ASSERT_TRUE(pool.release(Ids{2}).isOk());
  ASSERT_TRUE(pool.release(Ids{0, 3}).isOk());
  EXPECT_EQ(pool.freeQueue(), (Ids{2, 0, 3}));
  Result<Ids> next = pool.allocate(1);
  ASSERT_TRUE(next.isOk());
  EXPECT_EQ(*next, (Ids{2}));
}

TEST(BlockPoolTest, AllocateFailsWithoutTakingAnything) {
  BlockPool pool(3);
  ASSERT_TRUE(pool.allocate(2).isOk());
  Result<Ids> tooMany = pool.allocate(2);
  ASSERT_FALSE(tooMany.isOk());
  EXPECT_EQ(tooMany.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(tooMany.status().message().find("2 blocks requested, 1 of 3 free"), std::string::npos)
      << tooMany.status().message();
  EXPECT_EQ(pool.numFreeBlocks(), 1);
}

TEST(BlockPoolTest, CachedBlockStaysFindableAfterReleaseUntilEvicted) {
  BlockPool pool(3);
  ASSERT_TRUE(pool.allocate(2).isOk()); // blocks 0, 1
  const BlockHash h = 0x1234;
  EXPECT_TRUE(pool.markCached(0, h));
  EXPECT_FALSE(pool.markCached(1, h)) << "a hash has one canonical block";
  ASSERT_TRUE(pool.release(Ids{0}).isOk());
  EXPECT_EQ(pool.refCount(0), 0);
  EXPECT_EQ(pool.findCached(h), 0);
  EXPECT_EQ(pool.numFreeBlocks(), 2);
  EXPECT_EQ(pool.freeQueue(), (Ids{2, 0}));

  // A hit takes the cached block back out of the free queue.
  ASSERT_TRUE(pool.retain(Ids{0}).isOk());
  EXPECT_EQ(pool.refCount(0), 1);
  EXPECT_EQ(pool.freeQueue(), (Ids{2}));
  ASSERT_TRUE(pool.release(Ids{0}).isOk());

  // Eviction happens lazily: block 2 (uncached, older in the queue) goes first.
  Result<Ids> one = pool.allocate(1);
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(*one, (Ids{2}));
  EXPECT_EQ(pool.findCached(h), 0);
  Result<Ids> evicting = pool.allocate(1);
  ASSERT_TRUE(evicting.isOk());
  EXPECT_EQ(*evicting, (Ids{0}));
  EXPECT_FALSE(pool.findCached(h).has_value());
  EXPECT_FALSE(pool.isCached(0));
  EXPECT_EQ(pool.numCachedBlocks(), 0);
}

TEST(BlockPoolTest, SharedBlockReturnsToTheQueueOnlyAtRefCountZero) {
  BlockPool pool(2);
  ASSERT_TRUE(pool.allocate(1).isOk());
  ASSERT_TRUE(pool.retain(Ids{0}).isOk());
  EXPECT_EQ(pool.refCount(0), 2);
  ASSERT_TRUE(pool.release(Ids{0}).isOk());
  EXPECT_EQ(pool.numFreeBlocks(), 1);
  ASSERT_TRUE(pool.release(Ids{0}).isOk());
  EXPECT_EQ(pool.numFreeBlocks(), 2);
}

TEST(BlockPoolTest, InvalidIdsAreErrors) {
  BlockPool pool(2);
  EXPECT_EQ(pool.retain(Ids{2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.release(Ids{-1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.allocate(-1).status().code(), StatusCode::kInvalidArgument);
}

#ifdef NDEBUG
TEST(BlockPoolTest, ReleasingAFreeBlockIsAnErrorAndNeverGoesNegative) {
  BlockPool pool(2);
  Status status = pool.release(Ids{1});
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_EQ(pool.refCount(1), 0);
  EXPECT_EQ(pool.numFreeBlocks(), 2);
  EXPECT_EQ(pool.freeQueue(), (Ids{0, 1}));
}
#else
TEST(BlockPoolDeathTest, ReleasingAFreeBlockAssertsInDebugBuilds) {
  BlockPool pool(2);
  EXPECT_DEATH((void)pool.release(Ids{1}), "no reference");
}
#endif

} // namespace
} // namespace kiln::rt
