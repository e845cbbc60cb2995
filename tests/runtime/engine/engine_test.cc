// The threaded Engine: requests in and outputs out through queues, from several caller threads.
#include "runtime/engine/engine.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

#include <thread>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;
using namespace std::chrono_literals;

std::unique_ptr<Engine> makeEngine(const EngineConfig &config) {
  Result<std::unique_ptr<Engine>> engine = Engine::create(config);
  EXPECT_TRUE(engine.isOk()) << engine.status().toString();
  return std::move(engine).value();
}

// Lets a fixed number of steps through, then holds the engine thread inside execute() until
// allowed: makes "cancel while running" deterministic.
class StepGate {
public:
  explicit StepGate(int allowed) : allowed_(allowed) {}
  Status wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    opened_.wait(lock, [&] { return passed_ < allowed_; });
    ++passed_;
    return okStatus();
  }
  void allow(int more) {
    std::lock_guard<std::mutex> lock(mutex_);
    allowed_ += more;
    opened_.notify_all();
  }

private:
  std::mutex mutex_;
  std::condition_variable opened_;
  int allowed_ = 0;
  int passed_ = 0;
};

Completion readAll(OutputStream &stream) {
  std::map<RequestId, Completion> got;
  RequestId id = 0;
  while (std::optional<RequestOutput> out = stream.next()) {
    id = out->requestId;
    collect({*out}, got);
  }
  return got[id];
}

TEST(EngineTest, ConcurrentSubmittersGetReferenceOutputs) {
  FakeRunner runner(fakeConfig());
  EngineConfig config = engineConfig(&runner);
  config.numKvBlocks = 32; // tight: preemption happens under the threads too
  auto engine = makeEngine(config);
  std::mt19937 rng(99);
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i)
    requests.push_back(makeRequest(randomPrompt(rng, 1, 40), 500 + i, i % 3 ? 0.8f : 0.0f, 20));
  std::vector<Completion> results(requests.size());
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (size_t i = t; i < requests.size(); i += 4) {
        Result<RequestHandle> h = engine->submit(requests[i]);
        ASSERT_TRUE(h.isOk()) << h.status().toString();
        results[i] = readAll(*h->stream);
      }
    });
  }
  for (std::thread &t : callers)
    t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    Completion want = referenceCompletion(runner, requests[i], {kEos}, engine->limits().maxSeqLen);
    ASSERT_TRUE(results[i].finished);
    EXPECT_EQ(results[i].ids[0], want.ids[0]) << "request " << i;
    EXPECT_EQ(results[i].reasons[0], want.reasons[0]);
  }
  const MetricsSnapshot m = engine->metrics();
  EXPECT_EQ(m.requestsFinished, 16u);
  EXPECT_EQ(m.timeToFirstToken.count, 16u);
  uint64_t tokens = 0;
  for (const Completion &c : results)
    tokens += c.ids[0].size();
  EXPECT_EQ(m.generationTokens, tokens);
  EXPECT_EQ(m.interTokenLatency.count, tokens - 16);
  EXPECT_EQ(m.kvBlocksUsed, 0);
  EXPECT_EQ(m.kvBlocksTotal, 32);
}

TEST(EngineTest, SubmitRejectsInvalidRequestsOnTheCallersThread) {
  FakeRunner runner(fakeConfig());
  auto engine = makeEngine(engineConfig(&runner));
  Result<RequestHandle> tooLong = engine->submit(makeRequest(std::vector<int32_t>(129, 1), 1));
  ASSERT_FALSE(tooLong.isOk());
  EXPECT_EQ(tooLong.status().message(), "prompt has 129 tokens; max_seq_len is 128");
  Request bad = makeRequest({1, 2}, 1);
  bad.sampling.topP = 2.0f;
  EXPECT_EQ(engine->submit(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineTest, CancelAbortsARunningRequest) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  FakeRunner runner(fc);
  StepGate gate(1);
  runner.setFailureHook([&](const StepBatch &) { return gate.wait(); });
  auto engine = makeEngine(engineConfig(&runner));
  Result<RequestHandle> h = engine->submit(makeRequest({1, 2, 3}, 1, 1.0f, std::nullopt));
  ASSERT_TRUE(h.isOk());
  std::optional<RequestOutput> first = h->stream->next(); // step 2 now waits at the gate
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tokenIds.size(), 1u);
  ASSERT_TRUE(engine->cancel(h->id).isOk());
  gate.allow(1000);
  Completion rest = readAll(*h->stream);
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.reasons[0], FinishReason::kAbort);
  EXPECT_TRUE(h->stream->finished());
  EXPECT_EQ(engine->cancel(h->id).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->cancel(424242).code(), StatusCode::kNotFound);
  engine->shutdown();
  EXPECT_EQ(engine->metrics().kvBlocksUsed, 0);
  EXPECT_EQ(engine->metrics().requestsAborted, 1u);
}

TEST(EngineTest, ShutdownDrainsInFlightRequestsAndRejectsNewOnes) {
  FakeRunner runner(fakeConfig());
  auto engine = makeEngine(engineConfig(&runner));
  std::vector<RequestHandle> handles;
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(makeRequest({1, 2, 3, i + 4}, 70 + i, 0.9f, 30));
    handles.push_back(*engine->submit(requests.back()));
  }
  engine->shutdown();
  for (size_t i = 0; i < handles.size(); ++i) {
    Completion c = readAll(*handles[i].stream);
    ASSERT_TRUE(c.finished);
    EXPECT_NE(c.reasons[0], FinishReason::kAbort);
    EXPECT_EQ(c.ids[0], referenceCompletion(runner, requests[i], {kEos}, 128).ids[0]);
  }
  Result<RequestHandle> late = engine->submit(makeRequest({1}, 1));
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  engine->shutdown(); // idempotent
}

TEST(EngineTest, ShutdownNowAbortsInFlightRequests) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  FakeRunner runner(fc);
  StepGate gate(1);
  runner.setFailureHook([&](const StepBatch &) { return gate.wait(); });
  auto engine = makeEngine(engineConfig(&runner));
  Result<RequestHandle> h = engine->submit(makeRequest({1, 2, 3}, 1, 1.0f, std::nullopt));
  ASSERT_TRUE(h.isOk());
  ASSERT_TRUE(h->stream->next().has_value());
  std::thread stopper([&] { engine->shutdownNow(); });
  // New submissions fail once the shutdown flags are set (under the same lock).
  while (engine->submit(makeRequest({1}, 1)).isOk())
    std::this_thread::sleep_for(1ms);
  gate.allow(1000);
  stopper.join();
  Completion c = readAll(*h->stream);
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(c.reasons[0], FinishReason::kAbort);
}

TEST(EngineTest, PollingWithATimeout) {
  FakeRunner runner(fakeConfig());
  auto engine = makeEngine(engineConfig(&runner));
  Result<RequestHandle> h = engine->submit(makeRequest({5, 6}, 3, 0.0f, 4));
  ASSERT_TRUE(h.isOk());
  int outputs = 0;
  for (int spins = 0; spins < 1000 && !h->stream->finished(); ++spins)
    if (h->stream->nextFor(10ms))
      ++outputs;
  EXPECT_TRUE(h->stream->finished());
  EXPECT_GE(outputs, 1);
  EXPECT_FALSE(h->stream->nextFor(1ms).has_value());
  EXPECT_FALSE(h->stream->tryNext().has_value());
}

TEST(EngineTest, FailedStepFailsOnlyItsRequests) {
  FakeRunner runner(fakeConfig());
  std::atomic<bool> failNext{false};
  runner.setFailureHook([&](const StepBatch &) {
    return failNext.exchange(false) ? unavailable("device lost") : okStatus();
  });
  auto engine = makeEngine(engineConfig(&runner));
  failNext = true;
  Result<RequestHandle> doomed = engine->submit(makeRequest({1, 2, 3}, 1, 1.0f, 5));
  ASSERT_TRUE(doomed.isOk());
  Completion failed = readAll(*doomed->stream);
  EXPECT_EQ(failed.reasons[0], FinishReason::kError);
  EXPECT_EQ(failed.error.code(), StatusCode::kUnavailable);
  EXPECT_EQ(failed.error.message(), "model step: device lost");
  Request ok = makeRequest({4, 5, 6}, 2, 1.0f, 5);
  Result<RequestHandle> fine = engine->submit(ok);
  ASSERT_TRUE(fine.isOk());
  Completion c = readAll(*fine->stream);
  EXPECT_EQ(c.ids[0], referenceCompletion(runner, ok, {kEos}, 128).ids[0]);
  EXPECT_EQ(engine->metrics().failedSteps, 1u);
}

} // namespace
} // namespace kiln::rt
