// Greedy sampling through StepOutput::argmaxIds: the engine marks a sequence LogitsWanted::kArgmax
// only when sampleToken would return argmaxToken of its raw row, and tokens are identical whether
// the runner answers such steps with ids (FakeRunnerConfig::answerArgmax) or with full rows.
#include "runtime/engine/engine_core.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;
using Ids = std::vector<int32_t>;

struct EngineRun {
  std::map<RequestId, Completion> got;
  uint64_t argmaxSteps = 0;
  std::vector<std::vector<LogitsWanted>> wanted; // per step, per batch sequence
};

EngineRun runWith(FakeRunnerConfig fc, bool answerArgmax, const std::vector<Request> &requests) {
  fc.answerArgmax = answerArgmax;
  FakeRunner runner(fc);
  EngineRun run;
  runner.setFailureHook([&](const StepBatch &batch) {
    std::vector<LogitsWanted> step;
    for (const SequenceStep &s : batch.sequences)
      step.push_back(s.logits);
    run.wanted.push_back(std::move(step));
    return okStatus();
  });
  auto core = makeCore(engineConfig(&runner));
  run.got = runTogether(*core, requests);
  run.argmaxSteps = runner.stats().argmaxSteps;
  return run;
}

int32_t countWanted(const EngineRun &run, LogitsWanted w) {
  int32_t n = 0;
  for (const std::vector<LogitsWanted> &step : run.wanted)
    n += static_cast<int32_t>(std::count(step.begin(), step.end(), w));
  return n;
}

// Steps the runner may answer with ids: every sequence wanting logits asks for kArgmax.
uint64_t allArgmaxSteps(const EngineRun &run) {
  uint64_t n = 0;
  for (const std::vector<LogitsWanted> &step : run.wanted) {
    const auto argmax = std::count(step.begin(), step.end(), LogitsWanted::kArgmax);
    const auto none = std::count(step.begin(), step.end(), LogitsWanted::kNone);
    n += argmax > 0 && argmax + none == static_cast<std::ptrdiff_t>(step.size());
  }
  return n;
}

std::vector<Request> greedyRequests() {
  std::vector<Request> r;
  r.push_back(makeRequest(rampPrompt(7, 1, 50), 1, 0.0f, 20));
  r.push_back(makeRequest(rampPrompt(12, 9, 50), 2, 0.0f, 9));
  Request stops = makeRequest(rampPrompt(5, 3, 50), 3, 0.0f, 30);
  stops.sampling.stopTokenIds = {17, 23};
  r.push_back(stops);
  Request ignoreEos = makeRequest(rampPrompt(9, 30, 50), 4, 0.0f, 16);
  ignoreEos.sampling.ignoreEos = true;
  r.push_back(ignoreEos);
  Request parallel = makeRequest(rampPrompt(6, 11, 50), 5, 0.0f, 12);
  parallel.sampling.n = 3; // greedy samples fork from one row, then each is argmax-eligible
  r.push_back(parallel);
  return r;
}

TEST(EngineCoreArgmaxTest, GreedyTokensAreIdenticalWithAndWithoutArgmaxIds) {
  FakeRunner reference(fakeConfig());
  const std::vector<Request> requests = greedyRequests();
  EngineRun rows = runWith(fakeConfig(), false, requests);
  EngineRun ids = runWith(fakeConfig(), true, requests);
  EXPECT_EQ(rows.argmaxSteps, 0u);
  EXPECT_GT(ids.argmaxSteps, 10u) << "decode steps of greedy requests go through argmaxIds";
  EXPECT_EQ(ids.argmaxSteps, allArgmaxSteps(ids));
  EXPECT_EQ(countWanted(rows, LogitsWanted::kArgmax), countWanted(ids, LogitsWanted::kArgmax));
  for (RequestId id = 1; id <= requests.size(); ++id) {
    const Completion &a = rows.got[id], &b = ids.got[id];
    ASSERT_TRUE(a.finished && b.finished) << "request " << id;
    EXPECT_TRUE(a.error.isOk() && b.error.isOk()) << "request " << id;
    EXPECT_EQ(a.ids, b.ids) << "request " << id;
    EXPECT_EQ(a.reasons, b.reasons) << "request " << id;
    if (requests[id - 1].sampling.n == 1)
      EXPECT_EQ(b.ids[0], referenceCompletion(reference, requests[id - 1], {kEos}, 128).ids[0])
          << "request " << id;
  }
  ASSERT_EQ(ids.got[5].ids.size(), 3u);
  EXPECT_EQ(ids.got[5].ids[1], ids.got[5].ids[0]) << "greedy parallel samples agree";
}

TEST(EngineCoreArgmaxTest, LogprobsPenaltiesAndSamplingKeepHostSampling) {
  Request logprobs = makeRequest(rampPrompt(7, 1, 50), 1, 0.0f, 10);
  logprobs.sampling.logprobs = 2;
  Request repetition = makeRequest(rampPrompt(8, 2, 50), 2, 0.0f, 10);
  repetition.sampling.repetitionPenalty = 1.5f;
  Request presence = makeRequest(rampPrompt(9, 3, 50), 3, 0.0f, 10);
  presence.sampling.presencePenalty = 0.5f;
  Request frequency = makeRequest(rampPrompt(10, 4, 50), 4, 0.0f, 10);
  frequency.sampling.frequencyPenalty = 0.5f;
  Request sampled = makeRequest(rampPrompt(11, 5, 50), 5, 0.7f, 10);
  FakeRunner reference(fakeConfig());
  for (const Request &r : {logprobs, repetition, presence, frequency, sampled}) {
    EngineRun run = runWith(fakeConfig(), true, {r});
    EXPECT_EQ(countWanted(run, LogitsWanted::kArgmax), 0) << "seed " << *r.sampling.seed;
    EXPECT_EQ(run.argmaxSteps, 0u);
    const Completion want = referenceCompletion(reference, r, {kEos}, 128);
    EXPECT_EQ(run.got[1].ids[0], want.ids[0]) << "seed " << *r.sampling.seed;
    EXPECT_EQ(run.got[1].logprobs[0].size(), r.sampling.logprobs ? want.ids[0].size() : 0u);
  }
  // Mixed with an eligible greedy request: the steps they share are answered with full rows.
  Request greedy = makeRequest(rampPrompt(6, 7, 50), 6, 0.0f, 10);
  EngineRun mixed = runWith(fakeConfig(), true, {greedy, repetition});
  EXPECT_GT(countWanted(mixed, LogitsWanted::kArgmax), 0);
  EXPECT_GT(countWanted(mixed, LogitsWanted::kLast), 0);
  EXPECT_EQ(mixed.argmaxSteps, allArgmaxSteps(mixed));
  EXPECT_LT(mixed.argmaxSteps, mixed.wanted.size()) << "the first step is mixed";
  EXPECT_EQ(mixed.got[1].ids[0], referenceCompletion(reference, greedy, {kEos}, 128).ids[0]);
  EXPECT_EQ(mixed.got[2].ids[0], referenceCompletion(reference, repetition, {kEos}, 128).ids[0]);
}

TEST(EngineCoreArgmaxTest, MinTokensSuppressionUsesRowsUntilReached) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = 20.0f; // eos is always the argmax
  Request r = makeRequest(rampPrompt(6, 1, 50), 1, 0.0f, 8);
  r.sampling.minTokens = 3;
  EngineRun run = runWith(fc, true, {r});
  // Tokens 1-3 suppress eos (host sampling of full rows); token 4 is eos from argmaxIds.
  ASSERT_EQ(run.wanted.size(), 4u);
  EXPECT_EQ(run.wanted[0], std::vector<LogitsWanted>{LogitsWanted::kLast});
  EXPECT_EQ(run.wanted[2], std::vector<LogitsWanted>{LogitsWanted::kLast});
  EXPECT_EQ(run.wanted[3], std::vector<LogitsWanted>{LogitsWanted::kArgmax});
  EXPECT_EQ(run.argmaxSteps, 1u);
  FakeRunner reference(fc);
  EXPECT_EQ(run.got[1].ids[0], referenceCompletion(reference, r, {kEos}, 128).ids[0]);
  EXPECT_EQ(run.got[1].ids[0].back(), kEos);
  EXPECT_EQ(run.got[1].reasons[0], FinishReason::kStop);
}

TEST(EngineCoreArgmaxTest, NoFiniteLogitFailsTheRequestAsHostSamplingDoes) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosTokenIds.clear();
  for (int32_t id = 0; id < fc.limits.vocabSize; ++id)
    fc.eosTokenIds.push_back(id); // every logit is boosted to -inf
  fc.eosLogitBoost = -std::numeric_limits<float>::infinity();
  Request first = makeRequest(rampPrompt(6, 1, 50), 1, 0.0f, 8);
  Request second = makeRequest(rampPrompt(5, 2, 50), 2, 0.0f, 8);
  for (bool answerArgmax : {false, true}) {
    EngineRun run = runWith(fc, answerArgmax, {first, second});
    for (RequestId id : {1, 2}) {
      const Completion &c = run.got[id];
      EXPECT_TRUE(c.finished);
      ASSERT_EQ(c.reasons.size(), 1u);
      EXPECT_EQ(c.reasons[0], FinishReason::kError);
      EXPECT_EQ(c.error.message(), "sampling: no finite logit left among 64 (all NaN, -inf or "
                                   "masked)")
          << "answerArgmax " << answerArgmax;
      EXPECT_TRUE(c.ids[0].empty());
    }
  }
}

} // namespace
} // namespace kiln::rt
