// EngineCore's vLLM-compatible metrics after scripted requests on a fake clock: prefix-cache
// queries and hits in tokens, per-request queue / prefill / decode times, tokens per step, and
// the KV cache's configuration.
#include "engine_test_util.h"

#include <chrono>

namespace kiln::rt::testing {
namespace {

using Ids = std::vector<int32_t>;
using std::chrono::milliseconds;

// The engine's clock, moved only by the test and by the runner's forward pass.
struct FakeClock {
  EngineCore::Clock::time_point now{};
  std::function<EngineCore::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

// Every forward pass takes `forward` on `clock`.
void timeForwards(FakeRunner &runner, FakeClock &clock, milliseconds forward) {
  runner.setFailureHook([&clock, forward](const StepBatch &) {
    clock.now += forward;
    return okStatus();
  });
}

Request exactRequest(Ids prompt, int32_t maxTokens, int32_t n = 1) {
  Request r = makeRequest(std::move(prompt), 7, 0.0f, maxTokens);
  r.sampling.ignoreEos = true; // exactly maxTokens tokens per sample
  r.sampling.n = n;
  if (n > 1)
    r.sampling.temperature = 1.0f; // parallel samples need sampling, not greedy
  return r;
}

void stepUntilIdle(EngineCore &core) {
  while (core.hasWork())
    core.step();
}

std::vector<uint64_t> bucketCounts(const HistogramSnapshot &h, size_t n) {
  return std::vector<uint64_t>(h.counts.begin(), h.counts.begin() + static_cast<long>(n));
}

TEST(EngineMetricsTest, PrefixCacheQueriesHitsAndRequestPhasesOnAFakeClock) {
  FakeRunner runner(fakeConfig()); // block size 4
  FakeClock clock;
  timeForwards(runner, clock, milliseconds(200));
  EngineConfig config = engineConfig(&runner);
  config.clock = clock.fn();
  auto core = makeCore(config);

  // A: 10 prompt tokens queued 0.7 s, 3 tokens (steps of 10, 1 and 1 tokens).
  const Ids a = rampPrompt(10, 1, 60);
  core->addRequest(1, exactRequest(a, 3));
  clock.now += milliseconds(700);
  stepUntilIdle(*core);
  // B shares A's first two blocks: 13 tokens queried, 8 hit, 5 computed in one step; queued
  // 1.2 s, one token.
  Ids b(a.begin(), a.begin() + 8);
  for (int32_t t : {40, 41, 42, 43, 44})
    b.push_back(t);
  core->addRequest(2, exactRequest(b, 1));
  clock.now += milliseconds(1200);
  stepUntilIdle(*core);
  // C is aborted while waiting: never admitted, no phase ended.
  core->addRequest(3, exactRequest(a, 3));
  core->abortRequest(3);

  const MetricsSnapshot m = core->metrics().snapshot();
  EXPECT_EQ(m.prefixCacheQueries, 23u);
  EXPECT_EQ(m.cachedTokens, 8u);
  EXPECT_EQ(m.requestsFinished, 2u);
  EXPECT_EQ(m.requestsAborted, 1u);

  // Buckets 0.3, 0.5, 0.8, 1, 1.5, ...: one observation per request that produced a token.
  EXPECT_EQ(m.requestQueueTime.count, 2u);
  EXPECT_EQ(bucketCounts(m.requestQueueTime, 5), (std::vector<uint64_t>{0, 0, 1, 0, 1}));
  EXPECT_NEAR(m.requestQueueTime.sum, 0.7 + 1.2, 1e-9);
  EXPECT_EQ(m.requestPrefillTime.count, 2u);
  EXPECT_EQ(m.requestPrefillTime.counts[0], 2u);
  EXPECT_NEAR(m.requestPrefillTime.sum, 0.2 + 0.2, 1e-9);
  EXPECT_EQ(m.requestDecodeTime.count, 2u);
  EXPECT_EQ(bucketCounts(m.requestDecodeTime, 2), (std::vector<uint64_t>{1, 1})); // 0 and 0.4
  EXPECT_NEAR(m.requestDecodeTime.sum, 0.4, 1e-9);
  // Time to first token is queue + prefill here: arrival is the engine's clock at addRequest.
  EXPECT_EQ(m.timeToFirstToken.count, 2u);
  EXPECT_NEAR(m.timeToFirstToken.sum, m.requestQueueTime.sum + m.requestPrefillTime.sum, 1e-9);
  EXPECT_EQ(m.interTokenLatency.count, 2u);
  EXPECT_NEAR(m.interTokenLatency.sum, 0.4, 1e-9);

  // Steps of 10, 1, 1 and 5 tokens; buckets 1, 8, 16, ...
  EXPECT_EQ(m.iterationTokens.count, 4u);
  EXPECT_EQ(m.iterationTokens.count, m.steps);
  EXPECT_EQ(bucketCounts(m.iterationTokens, 4), (std::vector<uint64_t>{2, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(m.iterationTokens.sum, 17.0);
  EXPECT_DOUBLE_EQ(m.iterationTokens.sum, static_cast<double>(m.computedTokens));

  EXPECT_EQ(m.cacheConfig.blockSize, 4);
  EXPECT_EQ(m.cacheConfig.numGpuBlocks, 256);
  EXPECT_TRUE(m.cacheConfig.enablePrefixCaching);
}

TEST(EngineMetricsTest, ParallelSamplesAreOneRequestAndOneQuery) {
  FakeRunner runner(fakeConfig());
  FakeClock clock;
  timeForwards(runner, clock, milliseconds(100));
  EngineConfig config = engineConfig(&runner);
  config.clock = clock.fn();
  auto core = makeCore(config);
  core->addRequest(1, exactRequest(rampPrompt(6, 1, 60), 3, /*n=*/3));
  stepUntilIdle(*core);

  const MetricsSnapshot m = core->metrics().snapshot();
  // The forked samples join the running batch at once; only the parent was looked up.
  EXPECT_EQ(m.prefixCacheQueries, 6u);
  EXPECT_EQ(m.requestQueueTime.count, 1u);
  EXPECT_EQ(m.requestPrefillTime.count, 1u);
  EXPECT_EQ(m.requestDecodeTime.count, 1u);
  EXPECT_NEAR(m.requestQueueTime.sum, 0.0, 1e-9);
  EXPECT_NEAR(m.requestPrefillTime.sum, 0.1, 1e-9);
  EXPECT_NEAR(m.requestDecodeTime.sum, 0.2, 1e-9); // the last sample's third token
  EXPECT_EQ(m.iterationTokens.count, m.steps);
  EXPECT_DOUBLE_EQ(m.iterationTokens.sum, static_cast<double>(m.computedTokens));
}

TEST(EngineMetricsTest, NoQueriesWithPrefixCachingOff) {
  FakeRunner runner(fakeConfig());
  EngineConfig config = engineConfig(&runner);
  config.enablePrefixCaching = false;
  auto core = makeCore(config);
  const Ids a = rampPrompt(12, 1, 60);
  core->addRequest(1, exactRequest(a, 2));
  stepUntilIdle(*core);
  core->addRequest(2, exactRequest(a, 2));
  stepUntilIdle(*core);

  const MetricsSnapshot m = core->metrics().snapshot();
  EXPECT_EQ(m.prefixCacheQueries, 0u);
  EXPECT_EQ(m.cachedTokens, 0u);
  EXPECT_FALSE(m.cacheConfig.enablePrefixCaching);
  // On the real clock: counts and orderings only.
  EXPECT_EQ(m.requestQueueTime.count, 2u);
  EXPECT_EQ(m.requestPrefillTime.count, 2u);
  EXPECT_EQ(m.requestDecodeTime.count, 2u);
  EXPECT_LE(m.requestPrefillTime.sum, m.timeToFirstToken.sum);
  EXPECT_EQ(m.iterationTokens.count, m.steps);
  EXPECT_DOUBLE_EQ(m.iterationTokens.sum, static_cast<double>(m.computedTokens));
}

} // namespace
} // namespace kiln::rt::testing
