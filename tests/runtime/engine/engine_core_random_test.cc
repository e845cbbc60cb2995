// Batch invariance and randomized runs of the whole host stack (scheduler, KV cache, sampling,
// engine core) over the FakeRunner, whose logits depend only on each sequence's token history as
// read back through its block table.
#include "runtime/engine/engine_core.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;

Request randomRequest(std::mt19937 &rng, uint64_t seed) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Request r =
      makeRequest(randomPrompt(rng, 1, 40), seed, pick(0, 3) == 0 ? 0.0f : 0.9f, pick(1, 40));
  if (pick(0, 2) == 0) {
    r.sampling.topK = pick(0, 20);
    r.sampling.topP = 0.8f;
    r.sampling.repetitionPenalty = 1.2f;
    r.sampling.frequencyPenalty = 0.3f;
  }
  if (pick(0, 4) == 0)
    r.sampling.minTokens = std::min(*r.sampling.maxTokens, pick(0, 5));
  return r;
}

struct InvarianceCase {
  const char *name;
  int32_t numKvBlocks;
  int32_t maxTokensPerStep;
  bool prefix;
};

class BatchInvarianceTest : public ::testing::TestWithParam<InvarianceCase> {};

// 16 requests run together produce, token for token, what each produces alone.
TEST_P(BatchInvarianceTest, SixteenTogetherEqualEachAlone) {
  const InvarianceCase tc = GetParam();
  FakeRunner runner(fakeConfig());
  EngineConfig config = engineConfig(&runner);
  config.numKvBlocks = tc.numKvBlocks;
  config.maxTokensPerStep = tc.maxTokensPerStep;
  config.enablePrefixCaching = tc.prefix;
  std::mt19937 rng(2024);
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i)
    requests.push_back(randomRequest(rng, 1000 + i));
  // Two requests share a long prefix so the prefix cache takes part.
  requests[5].promptIds = requests[4].promptIds;
  requests[5].promptIds.push_back(7);

  auto core = makeCore(config);
  for (size_t i = 0; i < requests.size(); ++i)
    core->addRequest(i + 1, requests[i]);
  int32_t chunkedSteps = 0;
  for (int s = 0; s < 20000 && core->hasWork(); ++s) {
    core->step();
    const SchedulerOutput &plan = core->lastSchedule();
    ASSERT_LE(plan.numTokens, core->limits().maxTokensPerStep);
    ASSERT_LE(static_cast<int32_t>(plan.chunks.size()), core->limits().maxBatch);
    for (const ScheduledChunk &c : plan.chunks)
      chunkedSteps += !c.wantsLogits;
  }
  std::map<RequestId, Completion> together;
  collect(core->takeOutputs(), together);
  EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), tc.numKvBlocks);

  for (size_t i = 0; i < requests.size(); ++i) {
    FakeRunner soloRunner(fakeConfig());
    EngineConfig soloConfig = engineConfig(&soloRunner);
    auto solo = makeCore(soloConfig);
    std::map<RequestId, Completion> alone = runTogether(*solo, {requests[i]});
    const Completion &got = together[i + 1];
    ASSERT_TRUE(got.finished) << "request " << i;
    EXPECT_EQ(got.ids[0], alone[1].ids[0]) << "request " << i;
    EXPECT_EQ(got.reasons[0], alone[1].reasons[0]) << "request " << i;
    EXPECT_EQ(got.ids[0],
              referenceCompletion(runner, requests[i], {kEos}, core->limits().maxSeqLen).ids[0]);
  }
  const MetricsSnapshot m = core->metrics().snapshot();
  RecordProperty("preemptions", static_cast<int>(m.preemptions));
  RecordProperty("chunked_prefill_chunks", chunkedSteps);
  if (tc.numKvBlocks < 64)
    EXPECT_GT(m.preemptions, 0u) << "the tiny pool must force preemption";
  if (tc.maxTokensPerStep <= 16)
    EXPECT_GT(chunkedSteps, 0) << "the small budget must chunk prefills";
  EXPECT_EQ(runner.stats().maxTokensInStep <= tc.maxTokensPerStep, true);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, BatchInvarianceTest,
                         ::testing::Values(InvarianceCase{"roomy", 256, 64, true},
                                           InvarianceCase{"tiny_pool", 24, 64, true},
                                           InvarianceCase{"tiny_pool_no_prefix", 24, 64, false},
                                           InvarianceCase{"small_budget", 256, 8, true},
                                           InvarianceCase{"tiny_pool_small_budget", 24, 12, true}),
                         [](const auto &info) { return std::string(info.param.name); });

// Thousands of steps of random arrivals, parallel samples, cancellations and a tiny pool.
TEST(EngineCoreRandomTest, EveryRequestEndsOnceWithReferenceOutputsAndNoLeaks) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FakeRunner runner(fakeConfig());
    EngineConfig config = engineConfig(&runner);
    config.numKvBlocks = 40;
    config.maxTokensPerStep = 16;
    auto core = makeCore(config);
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::map<RequestId, Request> submitted;
    std::set<RequestId> aborted;
    std::map<RequestId, Completion> got;
    RequestId nextId = 1;
    int32_t headWait = 0, maxHeadWait = 0;
    SeqId head = -1;
    int step = 0;
    for (; step < 30000 && (step < 4000 || core->hasWork()); ++step) {
      if (step < 4000 && pick(0, 99) < 12) {
        Request r = randomRequest(rng, nextId * 7919);
        if (pick(0, 5) == 0)
          r.sampling.n = pick(2, 3);
        core->addRequest(nextId, r);
        submitted[nextId++] = r;
      }
      if (pick(0, 99) < 2) {
        std::vector<RequestId> live;
        for (const auto &entry : submitted)
          if (core->hasRequest(entry.first))
            live.push_back(entry.first);
        if (!live.empty()) {
          const RequestId victim = live[pick(0, static_cast<int>(live.size()) - 1)];
          aborted.insert(victim);
          core->abortRequest(victim);
        }
      }
      core->step();
      const SchedulerOutput &plan = core->lastSchedule();
      ASSERT_LE(plan.numTokens, 16);
      ASSERT_LE(static_cast<int32_t>(plan.chunks.size()), core->limits().maxBatch);
      const auto &waiting = core->scheduler().waitingQueue();
      const SeqId newHead = waiting.empty() ? -1 : waiting.front();
      headWait = newHead >= 0 && newHead == head ? headWait + 1 : 0;
      head = newHead;
      maxHeadWait = std::max(maxHeadWait, headWait);
      collect(core->takeOutputs(), got);
    }
    ASSERT_FALSE(core->hasWork()) << "did not drain in " << step << " steps";
    EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), 40) << "blocks leaked";
    EXPECT_EQ(core->kvCache().numSequences(), 0);
    EXPECT_LT(maxHeadWait, 2 * core->limits().maxSeqLen);
    EXPECT_LE(runner.stats().maxTokensInStep, 16);
    EXPECT_LE(runner.stats().maxSequencesInStep, 8);
    int32_t checked = 0;
    uint64_t generated = 0;
    for (const auto &[id, request] : submitted) {
      const Completion &c = got[id];
      ASSERT_TRUE(c.finished) << "request " << id;
      EXPECT_EQ(c.outputsAfterFinish, 0);
      ASSERT_EQ(static_cast<int32_t>(c.ids.size()), request.sampling.n);
      for (int32_t i = 0; i < request.sampling.n; ++i) {
        EXPECT_NE(c.reasons[i], FinishReason::kNone) << "request " << id << " sample " << i;
        EXPECT_NE(c.reasons[i], FinishReason::kError) << c.error.toString();
        generated += c.ids[i].size();
        Completion want = referenceCompletion(runner, request, {kEos}, core->limits().maxSeqLen, i);
        if (aborted.count(id)) {
          ASSERT_LE(c.ids[i].size(), want.ids[0].size());
          EXPECT_TRUE(std::equal(c.ids[i].begin(), c.ids[i].end(), want.ids[0].begin()))
              << "an aborted sample's tokens are a prefix of its full output";
          continue;
        }
        EXPECT_EQ(c.ids[i], want.ids[0]) << "request " << id << " sample " << i;
        EXPECT_EQ(c.reasons[i], want.reasons[0]);
        ++checked;
      }
    }
    const MetricsSnapshot m = core->metrics().snapshot();
    EXPECT_EQ(m.generationTokens, generated);
    EXPECT_EQ(m.requestsFinished + m.requestsAborted, submitted.size());
    EXPECT_GT(m.preemptions, 0u);
    EXPECT_GT(checked, 300);
    EXPECT_GT(aborted.size(), 5u);
    EXPECT_EQ(m.numRunning, 0);
    EXPECT_EQ(m.kvBlocksUsed, 0);
  }
}

} // namespace
} // namespace kiln::rt
