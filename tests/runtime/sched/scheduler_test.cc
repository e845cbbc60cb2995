#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

namespace kiln::rt {
namespace {

using Ids = std::vector<int32_t>;

struct Harness {
  std::unique_ptr<KvCacheManager> kv;
  std::unique_ptr<Scheduler> sched;

  Harness(SchedulerConfig config, int32_t blocks, int32_t blockSize, bool prefix = true) {
    kv = std::make_unique<KvCacheManager>(
        std::move(KvCacheManager::create({blocks, blockSize, 1024, prefix})).value());
    Result<Scheduler> s = Scheduler::create(config, kv.get());
    EXPECT_TRUE(s.isOk()) << s.status().toString();
    sched = std::make_unique<Scheduler>(std::move(s).value());
  }

  // Runs one step: the "model" appends token 1 to every sequence that got logits.
  SchedulerOutput step() {
    SchedulerOutput out = sched->schedule();
    EXPECT_TRUE(sched->onStepComputed(out).isOk());
    for (const ScheduledChunk &c : out.chunks)
      if (c.wantsLogits)
        EXPECT_TRUE(sched->appendToken(c.id, 1).isOk());
    return out;
  }
};

Ids iota(int32_t n, int32_t from = 0) {
  Ids ids(n);
  std::iota(ids.begin(), ids.end(), from);
  return ids;
}

std::vector<std::pair<SeqId, int32_t>> tokensPerSeq(const SchedulerOutput &out) {
  std::vector<std::pair<SeqId, int32_t>> v;
  for (const ScheduledChunk &c : out.chunks)
    v.emplace_back(c.id, c.numTokens);
  return v;
}

TEST(SchedulerTest, CreateValidatesTheConfig) {
  auto kv = std::move(KvCacheManager::create({8, 4, 16, true})).value();
  EXPECT_FALSE(Scheduler::create({0, 8, 64, true}, &kv).isOk());
  Result<Scheduler> small = Scheduler::create({8, 4, 64, true}, &kv);
  ASSERT_FALSE(small.isOk());
  EXPECT_NE(small.status().message().find("maxTokensPerStep (4) must be >= maxBatch (8)"),
            std::string::npos);
  Result<Scheduler> noChunk = Scheduler::create({2, 16, 64, false}, &kv);
  ASSERT_FALSE(noChunk.isOk());
  EXPECT_NE(noChunk.status().message().find("without chunked prefill"), std::string::npos);
  EXPECT_FALSE(Scheduler::create({2, 16, 64, true}, nullptr).isOk());
}

TEST(SchedulerTest, RejectsPromptsLongerThanMaxSeqLen) {
  Harness h({2, 16, 32, true}, 16, 4);
  Status s = h.sched->addSequence(1, iota(33), 0);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "prompt has 33 tokens; max_seq_len is 32");
  EXPECT_TRUE(h.sched->addSequence(2, iota(32), 0).isOk());
  EXPECT_EQ(h.sched->addSequence(2, iota(3), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.sched->addSequence(3, {}, 0).code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, ChunkedPrefillSplitsAPromptOverTheBudget) {
  Harness h({2, 8, 64, true}, 16, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(20), 0).isOk());
  SchedulerOutput a = h.step();
  ASSERT_EQ(a.chunks.size(), 1u);
  EXPECT_EQ(a.chunks[0].startPosition, 0);
  EXPECT_EQ(a.chunks[0].numTokens, 8);
  EXPECT_FALSE(a.chunks[0].wantsLogits);
  SchedulerOutput b = h.step();
  EXPECT_EQ(b.chunks[0].startPosition, 8);
  EXPECT_EQ(b.chunks[0].numTokens, 8);
  SchedulerOutput c = h.step();
  EXPECT_EQ(c.chunks[0].startPosition, 16);
  EXPECT_EQ(c.chunks[0].numTokens, 4);
  EXPECT_TRUE(c.chunks[0].wantsLogits);
  SchedulerOutput d = h.step();
  EXPECT_EQ(d.chunks[0].startPosition, 20);
  EXPECT_EQ(d.chunks[0].numTokens, 1);
  EXPECT_EQ(h.kv->blockTable(1).size(), 6u); // 21 tokens / 4 per block
}

TEST(SchedulerTest, DecodesGoFirstAndPrefillsShareTheRest) {
  Harness h({4, 10, 64, true}, 32, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(3), 0).isOk());
  h.step(); // seq 1 prefilled, now decoding
  ASSERT_TRUE(h.sched->addSequence(2, iota(30), 1).isOk());
  ASSERT_TRUE(h.sched->addSequence(3, iota(5), 2).isOk());
  SchedulerOutput out = h.step();
  EXPECT_EQ(tokensPerSeq(out), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 9}}));
  EXPECT_EQ(out.numTokens, 10);
  // Next step: decode of 1, then 2's prefill continues (oldest first), 3 still waits for budget.
  SchedulerOutput next = h.step();
  EXPECT_EQ(tokensPerSeq(next), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 9}}));
  EXPECT_EQ(h.sched->numWaiting(), 1);
}

TEST(SchedulerTest, WithoutChunkingAPromptIsAdmittedWholeOrNotAtAll) {
  Harness h({4, 16, 16, false}, 32, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(10), 0).isOk());
  ASSERT_TRUE(h.sched->addSequence(2, iota(10, 50), 1).isOk());
  SchedulerOutput out = h.step();
  EXPECT_EQ(tokensPerSeq(out), (std::vector<std::pair<SeqId, int32_t>>{{1, 10}}));
  SchedulerOutput next = h.step();
  EXPECT_EQ(tokensPerSeq(next), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 10}}));
}

TEST(SchedulerTest, MaxBatchLimitsRunningSequences) {
  Harness h({2, 64, 64, true}, 64, 4);
  for (SeqId id = 1; id <= 3; ++id)
    ASSERT_TRUE(h.sched->addSequence(id, iota(4), id).isOk());
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(h.sched->numRunning(), 2);
  ASSERT_TRUE(h.sched->finishSequence(1).isOk());
  SchedulerOutput next = h.step();
  EXPECT_EQ(tokensPerSeq(next), (std::vector<std::pair<SeqId, int32_t>>{{2, 1}, {3, 4}}));
}

TEST(SchedulerTest, PreemptsTheLatestArrivalAndRecomputesItsTokens) {
  // 4 blocks of 4 tokens. Two sequences of 7 tokens take 2 blocks each; when both need a third
  // block, the later one (2) is preempted and its blocks go to the earlier one.
  Harness h({4, 32, 64, true}, 4, 4, /*prefix=*/false);
  ASSERT_TRUE(h.sched->addSequence(1, iota(7), 0).isOk());
  ASSERT_TRUE(h.sched->addSequence(2, iota(7, 50), 1).isOk());
  h.step(); // both prefilled: 8 tokens each now (7 + 1 sampled)
  EXPECT_EQ(h.kv->pool().numFreeBlocks(), 0);
  SchedulerOutput out = h.step(); // both want position 7 -> fits in block 2 of each
  EXPECT_EQ(out.preempted.size(), 0u);
  SchedulerOutput grow = h.step(); // position 8 needs a third block each
  EXPECT_EQ(grow.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(tokensPerSeq(grow), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}}));
  const Sequence *victim = h.sched->find(2);
  ASSERT_NE(victim, nullptr);
  EXPECT_FALSE(victim->running);
  EXPECT_EQ(victim->numComputed, 0);
  EXPECT_EQ(victim->numTokens(), 9) << "generated tokens are kept";
  EXPECT_EQ(victim->numPreemptions, 1);
  EXPECT_EQ(h.sched->waitingQueue().front(), 2);
  ASSERT_TRUE(h.sched->finishSequence(1).isOk());
  SchedulerOutput back = h.step();
  ASSERT_EQ(back.chunks.size(), 1u);
  EXPECT_EQ(back.chunks[0].id, 2);
  EXPECT_EQ(back.chunks[0].startPosition, 0);
  EXPECT_EQ(back.chunks[0].numTokens, 9);
  EXPECT_TRUE(back.chunks[0].wantsLogits);
}

TEST(SchedulerTest, AQueueHeadThatDoesNotFitIsNeverOvertaken) {
  Harness h({4, 64, 64, true}, 6, 4, /*prefix=*/false);
  ASSERT_TRUE(h.sched->addSequence(1, iota(16), 0).isOk()); // 4 blocks (+1 later)
  h.step();
  ASSERT_TRUE(h.sched->addSequence(2, iota(12), 1).isOk()); // needs 3: only 1 free after 1 grows
  ASSERT_TRUE(h.sched->addSequence(3, iota(2), 2).isOk());  // would fit, but must wait
  SchedulerOutput out = h.step();
  EXPECT_EQ(tokensPerSeq(out), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}}));
  EXPECT_EQ(h.sched->numWaiting(), 2);
  ASSERT_TRUE(h.sched->finishSequence(1).isOk());
  SchedulerOutput next = h.step();
  EXPECT_EQ(tokensPerSeq(next), (std::vector<std::pair<SeqId, int32_t>>{{2, 12}, {3, 2}}));
}

TEST(SchedulerTest, PrefixHitStartsASequenceFurtherAlong) {
  Harness h({4, 64, 64, true}, 16, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(10), 0).isOk());
  h.step();
  Ids shared = iota(8);
  shared.push_back(99);
  shared.push_back(98);
  ASSERT_TRUE(h.sched->addSequence(2, shared, 1).isOk());
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].id, 2);
  EXPECT_EQ(out.chunks[1].startPosition, 8);
  EXPECT_EQ(out.chunks[1].numTokens, 2);
  EXPECT_EQ(out.numCachedTokens, 8);
  EXPECT_EQ(h.sched->find(2)->numCachedPromptTokens, 8);
  EXPECT_EQ(h.kv->blockTable(2)[0], h.kv->blockTable(1)[0]);
  EXPECT_EQ(h.kv->blockTable(2)[1], h.kv->blockTable(1)[1]);
}

// RoPE that follows the sequence's length past 12 tokens (RunnerLimits::ropeSwitchLength): only
// sequences of at most 12 tokens take or give prefix-cache blocks; a longer one computes its whole
// prompt itself and publishes none of its blocks (their keys rotate by its length).
TEST(SchedulerTest, SequencesPastTheRopeSwitchNeitherTakeNorGivePrefixBlocks) {
  SchedulerConfig config{4, 64, 64, true, /*ropeSwitchLength=*/12};
  Harness h(config, 32, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(10), 0).isOk()); // L 10: its 2 full blocks cached
  h.step();
  Ids longer = iota(8);
  for (int32_t i = 0; i < 8; ++i)
    longer.push_back(100 + i); // L 16: past the switch
  ASSERT_TRUE(h.sched->addSequence(2, longer, 1).isOk());
  Ids shorter = iota(8);
  shorter.push_back(99); // L 9: may reuse sequence 1's two blocks
  ASSERT_TRUE(h.sched->addSequence(3, shorter, 2).isOk());
  SchedulerOutput out = h.step();
  ASSERT_EQ(tokensPerSeq(out), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 16}, {3, 1}}));
  EXPECT_EQ(out.chunks[1].startPosition, 0);
  EXPECT_EQ(out.chunks[2].startPosition, 8);
  EXPECT_EQ(out.numCachedTokens, 8);
  EXPECT_NE(h.kv->blockTable(2)[0], h.kv->blockTable(1)[0]);
  EXPECT_EQ(h.kv->blockTable(3)[0], h.kv->blockTable(1)[0]);
  // Sequence 2's blocks were written past the switch: a copy of its prompt finds nothing.
  ASSERT_TRUE(h.sched->addSequence(4, longer, 3).isOk());
  out = h.step();
  EXPECT_EQ(out.chunks.back().id, 4);
  EXPECT_EQ(out.chunks.back().startPosition, 0);
}

// longrope (RunnerLimits::recomputeAtRopeSwitch): a sequence whose keys were written for at most
// 12 tokens recomputes all of them once it grows to 13, then decodes on; one that starts past 12
// never restarts.
TEST(SchedulerTest, CrossingTheRopeSwitchRecomputesTheSequenceOnce) {
  SchedulerConfig config{4,
                         64,
                         64,
                         true,
                         /*ropeSwitchLength=*/12,
                         /*recomputeAtRopeSwitch=*/true};
  Harness h(config, 32, 4);
  ASSERT_TRUE(h.sched->addSequence(1, iota(11), 0).isOk());      // prefill 11, then decode
  ASSERT_TRUE(h.sched->addSequence(2, iota(20, 100), 1).isOk()); // past the switch from the start
  EXPECT_EQ(tokensPerSeq(h.step()), (std::vector<std::pair<SeqId, int32_t>>{{1, 11}, {2, 20}}));
  // Sequence 1 has 12 tokens: position 11 decodes at length 12, still short.
  EXPECT_EQ(tokensPerSeq(h.step()), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 1}}));
  // 13 tokens: every key again, from position 0, in one chunk; sequence 2 decodes on.
  SchedulerOutput crossing = h.step();
  ASSERT_EQ(tokensPerSeq(crossing), (std::vector<std::pair<SeqId, int32_t>>{{1, 13}, {2, 1}}));
  EXPECT_EQ(crossing.chunks[0].startPosition, 0);
  EXPECT_TRUE(crossing.chunks[0].wantsLogits);
  EXPECT_TRUE(crossing.preempted.empty());
  EXPECT_EQ(tokensPerSeq(h.step()), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 1}}));
  EXPECT_EQ(h.sched->find(1)->numComputed, 14);
}

TEST(SchedulerTest, ForkedSampleSharesFullPromptBlocksAndRecomputesTheTail) {
  Harness h({4, 64, 64, true}, 16, 4, /*prefix=*/false);
  ASSERT_TRUE(h.sched->addSequence(1, iota(10), 0).isOk());
  SchedulerOutput first = h.sched->schedule();
  ASSERT_TRUE(h.sched->onStepComputed(first).isOk());
  ASSERT_TRUE(h.sched->forkSequence(1, 2, 42).isOk());
  ASSERT_TRUE(h.sched->appendToken(1, 41).isOk());
  const Sequence *child = h.sched->find(2);
  EXPECT_EQ(child->numComputed, 8);
  EXPECT_EQ(child->tokenIds.back(), 42);
  EXPECT_EQ(child->numTokens(), 11);
  EXPECT_EQ(h.kv->pool().refCount(h.kv->blockTable(1)[0]), 2);
  SchedulerOutput next = h.sched->schedule();
  // Parent decodes one token; the child computes prompt positions 8, 9 and its own first token.
  EXPECT_EQ(tokensPerSeq(next), (std::vector<std::pair<SeqId, int32_t>>{{1, 1}, {2, 3}}));
  EXPECT_EQ(next.chunks[1].startPosition, 8);
  StepBatch batch = h.sched->makeStepBatch(next);
  EXPECT_EQ(batch.sequences[1].tokenIds, (Ids{8, 9, 42}));
  EXPECT_NE(batch.sequences[1].blockTables[0][2], batch.sequences[0].blockTables[0][2]);
}

TEST(SchedulerTest, MakeStepBatchCarriesTokensPositionsAndTables) {
  Harness h({4, 64, 64, true}, 16, 4);
  ASSERT_TRUE(h.sched->addSequence(7, iota(6, 10), 0).isOk());
  SchedulerOutput out = h.sched->schedule();
  StepBatch batch = h.sched->makeStepBatch(out);
  ASSERT_EQ(batch.sequences.size(), 1u);
  EXPECT_EQ(batch.sequences[0].tokenIds, iota(6, 10));
  EXPECT_EQ(batch.sequences[0].startPosition, 0);
  EXPECT_EQ(batch.sequences[0].blockTables, (std::vector<Ids>{{0, 1}}));
  EXPECT_EQ(batch.sequences[0].logits, LogitsWanted::kLast);
}

} // namespace
} // namespace kiln::rt
