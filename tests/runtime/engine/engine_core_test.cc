#include "runtime/engine/engine_core.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;
using Ids = std::vector<int32_t>;

void expectMatchesReference(const Completion &got, const Completion &want, const char *what) {
  ASSERT_TRUE(got.finished) << what;
  EXPECT_EQ(got.ids[0], want.ids[0]) << what;
  EXPECT_EQ(got.reasons[0], want.reasons[0]) << what;
}

TEST(EngineCoreTest, CreateChecksLimitsAgainstTheRunner) {
  FakeRunner runner(fakeConfig());
  EngineConfig c = engineConfig(&runner);
  c.maxBatch = 9;
  Result<std::unique_ptr<EngineCore>> tooBig = EngineCore::create(c);
  ASSERT_FALSE(tooBig.isOk());
  EXPECT_EQ(tooBig.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(tooBig.status().message().find("EngineConfig.maxBatch = 9 exceeds the runner's limit 8"
                                           "; recompile with a larger --max-batch"),
            std::string::npos)
      << tooBig.status().message();
  c = engineConfig(nullptr);
  EXPECT_EQ(EngineCore::create(c).status().code(), StatusCode::kInvalidArgument);
  c = engineConfig(&runner);
  c.eosTokenIds = {64};
  EXPECT_FALSE(EngineCore::create(c).isOk());
  c = engineConfig(&runner);
  c.numKvBlocks = 10; // 40 tokens of KV: sequences are capped there
  auto core = makeCore(c);
  EXPECT_EQ(core->limits().maxSeqLen, 40);
  EXPECT_EQ(core->limits().maxBatch, 8);
}

TEST(EngineCoreTest, SingleRequestsMatchTheReference) {
  FakeRunner runner(fakeConfig());
  std::vector<Request> requests;
  requests.push_back(makeRequest(rampPrompt(7, 1, 60), 1, 0.0f));
  requests.push_back(makeRequest(rampPrompt(13, 5, 60), 2, 0.8f));
  Request penalized = makeRequest(rampPrompt(9, 3, 60), 3, 1.0f, 30);
  penalized.sampling.repetitionPenalty = 1.3f;
  penalized.sampling.frequencyPenalty = 0.4f;
  penalized.sampling.presencePenalty = 0.2f;
  penalized.sampling.topK = 10;
  penalized.sampling.topP = 0.9f;
  penalized.sampling.minP = 0.05f;
  requests.push_back(penalized);
  for (const Request &r : requests) {
    auto core = makeCore(engineConfig(&runner));
    std::map<RequestId, Completion> got = runTogether(*core, {r});
    Completion want = referenceCompletion(runner, r, {kEos}, 128);
    expectMatchesReference(got[1], want, "single request");
    EXPECT_EQ(got[1].usage.promptTokens, static_cast<int32_t>(r.promptIds.size()));
    EXPECT_EQ(got[1].usage.completionTokens, static_cast<int32_t>(want.ids[0].size()));
    EXPECT_EQ(got[1].outputsAfterFinish, 0);
    EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), 256);
  }
}

TEST(EngineCoreTest, MaxTokensEndsWithLengthAndMaxSeqLenCapsGeneration) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f; // never eos
  FakeRunner runner(fc);
  EngineConfig c = engineConfig(&runner);
  c.maxSeqLen = 20;
  auto core = makeCore(c);
  std::map<RequestId, Completion> got =
      runTogether(*core, {makeRequest(rampPrompt(5, 1, 60), 1, 1.0f, 3),
                          makeRequest(rampPrompt(5, 1, 60), 1, 1.0f, std::nullopt),
                          makeRequest(rampPrompt(20, 1, 60), 1, 1.0f, std::nullopt)});
  EXPECT_EQ(got[1].ids[0].size(), 3u);
  EXPECT_EQ(got[1].reasons[0], FinishReason::kLength);
  EXPECT_EQ(got[2].ids[0].size(), 15u) << "prompt 5 + 15 generated = max_seq_len 20";
  EXPECT_EQ(got[2].reasons[0], FinishReason::kLength);
  EXPECT_EQ(got[3].ids[0].size(), 1u) << "a prompt of exactly max_seq_len still gets one token";
  EXPECT_EQ(got[3].reasons[0], FinishReason::kLength);
}

TEST(EngineCoreTest, PromptLongerThanMaxSeqLenIsRejectedUpFront) {
  FakeRunner runner(fakeConfig());
  EngineConfig c = engineConfig(&runner);
  c.maxSeqLen = 40;
  auto core = makeCore(c);
  Status invalid = core->validate(makeRequest(rampPrompt(41, 1, 60), 1));
  EXPECT_EQ(invalid.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(invalid.message(), "prompt has 41 tokens; max_seq_len is 40");
  std::map<RequestId, Completion> got = runTogether(*core, {makeRequest(rampPrompt(41, 1, 60), 1)});
  EXPECT_TRUE(got[1].finished);
  EXPECT_EQ(got[1].reasons[0], FinishReason::kError);
  EXPECT_EQ(got[1].error.message(), "prompt has 41 tokens; max_seq_len is 40");
  EXPECT_EQ(core->validate(makeRequest({}, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core->validate(makeRequest({64}, 1)).code(), StatusCode::kInvalidArgument);
}

TEST(EngineCoreTest, EosStopsUnlessIgnoredAndMinTokensSuppressesIt) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = 20.0f; // eos is always the argmax
  FakeRunner runner(fc);
  auto core = makeCore(engineConfig(&runner));
  Request plain = makeRequest(rampPrompt(6, 1, 60), 1, 0.0f, 5);
  Request ignore = plain;
  ignore.sampling.ignoreEos = true;
  Request minTokens = plain;
  minTokens.sampling.minTokens = 3;
  std::map<RequestId, Completion> got = runTogether(*core, {plain, ignore, minTokens});
  EXPECT_EQ(got[1].ids[0], (Ids{kEos}));
  EXPECT_EQ(got[1].reasons[0], FinishReason::kStop);
  EXPECT_EQ(got[2].ids[0], (Ids{kEos, kEos, kEos, kEos, kEos}));
  EXPECT_EQ(got[2].reasons[0], FinishReason::kLength);
  ASSERT_EQ(got[3].ids[0].size(), 4u);
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(got[3].ids[0][i], kEos);
  EXPECT_EQ(got[3].ids[0][3], kEos);
  EXPECT_EQ(got[3].reasons[0], FinishReason::kStop);
  EXPECT_EQ(got[3].ids[0], referenceCompletion(runner, minTokens, {kEos}, 128).ids[0]);
}

FakeRunnerConfig neverEos() {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  return fc;
}

TEST(EngineCoreTest, StopTokenIdsStop) {
  FakeRunner runner(neverEos());
  Request r = makeRequest(rampPrompt(6, 1, 60), 4, 0.0f, 10);
  Completion free = referenceCompletion(runner, r, {kEos}, 128);
  ASSERT_GE(free.ids[0].size(), 3u);
  const int32_t stopId = free.ids[0][2];
  const size_t firstAt =
      std::find(free.ids[0].begin(), free.ids[0].end(), stopId) - free.ids[0].begin();
  r.sampling.stopTokenIds = {stopId};
  auto core = makeCore(engineConfig(&runner));
  std::map<RequestId, Completion> got = runTogether(*core, {r});
  EXPECT_EQ(got[1].ids[0], Ids(free.ids[0].begin(), free.ids[0].begin() + firstAt + 1));
  EXPECT_EQ(got[1].reasons[0], FinishReason::kStop);
}

TEST(EngineCoreTest, LogprobsMatchTheReference) {
  FakeRunner runner(fakeConfig());
  Request r = makeRequest(rampPrompt(10, 2, 60), 9, 0.7f, 12);
  r.sampling.logprobs = 3;
  auto core = makeCore(engineConfig(&runner));
  std::map<RequestId, Completion> got = runTogether(*core, {r});
  Completion want = referenceCompletion(runner, r, {kEos}, 128);
  ASSERT_EQ(got[1].logprobs[0].size(), got[1].ids[0].size());
  ASSERT_EQ(got[1].logprobs[0].size(), want.logprobs[0].size());
  for (size_t i = 0; i < want.logprobs[0].size(); ++i) {
    const TokenLogprobs &g = got[1].logprobs[0][i], &w = want.logprobs[0][i];
    EXPECT_EQ(g.sampled.tokenId, got[1].ids[0][i]);
    EXPECT_NEAR(g.sampled.logprob, w.sampled.logprob, 1e-6);
    ASSERT_EQ(g.top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(g.top[k].tokenId, w.top[k].tokenId);
      EXPECT_NEAR(g.top[k].logprob, w.top[k].logprob, 1e-6);
    }
    EXPECT_LE(g.top[1].logprob, g.top[0].logprob);
  }
}

TEST(EngineCoreTest, PrefixCacheComputesFewerTokensWithIdenticalOutput) {
  FakeRunner runner(fakeConfig());
  auto core = makeCore(engineConfig(&runner));
  const Ids a = rampPrompt(30, 1, 60);
  Ids b(a.begin(), a.begin() + 24);
  for (int32_t t : {50, 51, 52, 53, 54, 55})
    b.push_back(t);
  Request ra = makeRequest(a, 1, 0.0f, 6), rb = makeRequest(b, 2, 0.9f, 6);
  runTogether(*core, {ra});
  const uint64_t before = runner.stats().tokens;
  core->addRequest(10, rb);
  while (core->hasWork())
    core->step();
  std::map<RequestId, Completion> got;
  collect(core->takeOutputs(), got);
  const uint64_t computedB = runner.stats().tokens - before;

  FakeRunner coldRunner(fakeConfig());
  EngineConfig cold = engineConfig(&coldRunner);
  cold.enablePrefixCaching = false;
  auto coldCore = makeCore(cold);
  std::map<RequestId, Completion> coldGot = runTogether(*coldCore, {rb});
  const uint64_t computedCold = coldRunner.stats().tokens;

  EXPECT_EQ(got[10].ids[0], coldGot[1].ids[0]);
  EXPECT_EQ(got[10].ids[0], referenceCompletion(runner, rb, {kEos}, 128).ids[0]);
  EXPECT_EQ(got[10].usage.cachedPromptTokens, 24);
  EXPECT_EQ(computedCold - computedB, 24u);
  EXPECT_EQ(core->metrics().snapshot().cachedTokens, 24u);
  // The same prompt again: every full block but the one holding the last token hits.
  std::map<RequestId, Completion> again = runTogether(*core, {ra});
  EXPECT_EQ(again[1].usage.cachedPromptTokens, 28);
}

TEST(EngineCoreTest, ParallelSamplesSharePromptBlocks) {
  auto peakBlocks = [](const std::vector<Request> &requests, std::map<RequestId, Completion> &out,
                       FakeRunner &runner) {
    EngineConfig c = engineConfig(&runner);
    c.enablePrefixCaching = false; // measure fork sharing alone
    auto core = makeCore(c);
    for (size_t i = 0; i < requests.size(); ++i)
      core->addRequest(i + 1, requests[i]);
    int32_t peak = 0;
    while (core->hasWork()) {
      core->step();
      peak = std::max(peak, core->kvCache().pool().numUsedBlocks());
    }
    collect(core->takeOutputs(), out);
    EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), 256);
    return peak;
  };
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  FakeRunner runner(fc);
  const Ids prompt = rampPrompt(30, 1, 60);
  Request n4 = makeRequest(prompt, 77, 1.0f, 8);
  n4.sampling.n = 4;
  std::map<RequestId, Completion> shared, separate;
  const int32_t sharedPeak = peakBlocks({n4}, shared, runner);
  std::vector<Request> four(4, makeRequest(prompt, 77, 1.0f, 8));
  const int32_t separatePeak = peakBlocks(four, separate, runner);
  // Measured between steps, the peak is after the 7th token is sampled: 36 positions in KV, 9
  // blocks each when separate (36); shared: 7 full prompt blocks once, plus 2 private blocks per
  // sample for positions 28..35 (15).
  EXPECT_EQ(separatePeak, 36);
  EXPECT_EQ(sharedPeak, 15);
  ASSERT_EQ(shared[1].ids.size(), 4u);
  for (int32_t i = 0; i < 4; ++i) {
    Completion want = referenceCompletion(runner, n4, {kEos}, 128, i);
    EXPECT_EQ(shared[1].ids[i], want.ids[0]) << "sample " << i;
    EXPECT_EQ(shared[1].reasons[i], FinishReason::kLength);
  }
  EXPECT_NE(shared[1].ids[0], shared[1].ids[1]);
  EXPECT_EQ(shared[1].ids[0], separate[1].ids[0]) << "sample 0 is the same as an n=1 request";
  EXPECT_EQ(shared[1].usage.promptTokens, 30);
  EXPECT_EQ(shared[1].usage.completionTokens, 32);
}

TEST(EngineCoreTest, AbortEndsTheRequestAndFreesItsBlocks) {
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  FakeRunner runner(fc);
  auto core = makeCore(engineConfig(&runner));
  Request r = makeRequest(rampPrompt(10, 1, 60), 1, 1.0f, 50);
  r.sampling.n = 2;
  core->addRequest(1, r);
  core->addRequest(2, makeRequest(rampPrompt(5, 1, 60), 2, 1.0f, 3));
  core->step();
  core->step();
  EXPECT_GT(core->kvCache().pool().numUsedBlocks(), 0);
  core->abortRequest(1);
  core->abortRequest(12345); // unknown: ignored
  std::map<RequestId, Completion> got;
  collect(core->takeOutputs(), got);
  EXPECT_TRUE(got[1].finished);
  EXPECT_EQ(got[1].reasons,
            (std::vector<FinishReason>{FinishReason::kAbort, FinishReason::kAbort}));
  EXPECT_FALSE(core->hasRequest(1));
  while (core->hasWork())
    core->step();
  collect(core->takeOutputs(), got);
  EXPECT_EQ(got[2].reasons[0], FinishReason::kLength);
  EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), 256);
  EXPECT_EQ(core->metrics().snapshot().requestsAborted, 1u);
  EXPECT_EQ(core->metrics().snapshot().requestsFinished, 1u);
}

TEST(EngineCoreTest, AFailedStepFailsItsRequestsAndTheEngineGoesOn) {
  FakeRunner runner(fakeConfig());
  int calls = 0;
  runner.setFailureHook([&](const StepBatch &) {
    return ++calls == 3 ? internalError("injected device fault") : okStatus();
  });
  auto core = makeCore(engineConfig(&runner));
  Request a = makeRequest(rampPrompt(8, 1, 60), 1, 1.0f, 10),
          b = makeRequest(rampPrompt(9, 2, 60), 2, 1.0f, 10);
  core->addRequest(1, a);
  core->addRequest(2, b);
  for (int i = 0; i < 3; ++i)
    core->step();
  std::map<RequestId, Completion> got;
  collect(core->takeOutputs(), got);
  for (RequestId id : {1, 2}) {
    EXPECT_TRUE(got[id].finished);
    EXPECT_EQ(got[id].reasons[0], FinishReason::kError);
    EXPECT_EQ(got[id].error.code(), StatusCode::kInternal);
    EXPECT_EQ(got[id].error.message(), "model step: injected device fault");
    EXPECT_EQ(got[id].ids[0].size(), 2u) << "tokens of earlier steps were delivered";
  }
  EXPECT_EQ(core->kvCache().pool().numFreeBlocks(), 256);
  Request c = makeRequest(rampPrompt(7, 3, 60), 3, 1.0f, 10);
  std::map<RequestId, Completion> later = runTogether(*core, {c});
  expectMatchesReference(later[1], referenceCompletion(runner, c, {kEos}, 128), "after failure");
  EXPECT_EQ(core->metrics().snapshot().failedSteps, 1u);
  EXPECT_EQ(core->metrics().snapshot().requestsFailed, 2u);
}

// A detokenizer that spells token t as "t<t> " and holds back nothing.
class SpellingDetokenizer : public Detokenizer {
  class Stream : public TextStream {
  public:
    std::string append(int32_t id) override { return "t" + std::to_string(id) + " "; }
    std::string flush() override { return ""; }
  };

public:
  std::unique_ptr<TextStream> openStream(std::span<const int32_t>, bool) override {
    return std::make_unique<Stream>();
  }
};

// Holds back any tail that could start a stop string; stops at the first full match.
class SimpleStopMatcher : public StopStringFilter {
public:
  explicit SimpleStopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  StopCheck push(std::string_view delta) override {
    held_ += delta;
    for (const std::string &s : stops_) {
      size_t at = held_.find(s);
      if (at != std::string::npos)
        return {held_.substr(0, at), true};
    }
    size_t keep = 0;
    for (const std::string &s : stops_)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0)
          keep = k;
    StopCheck out{held_.substr(0, held_.size() - keep), false};
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string flush() override { return std::exchange(held_, ""); }

private:
  std::vector<std::string> stops_;
  std::string held_;
};

class SimpleStopFactory : public StopStringFilterFactory {
public:
  Result<std::unique_ptr<StopStringFilter>> create(const std::vector<std::string> &stops) override {
    return std::unique_ptr<StopStringFilter>(new SimpleStopMatcher(stops));
  }
};

TEST(EngineCoreTest, TextHooksProduceDeltasAndStopStrings) {
  FakeRunner runner(neverEos());
  SpellingDetokenizer detok;
  SimpleStopFactory stops;
  Request r = makeRequest(rampPrompt(6, 1, 60), 3, 0.0f, 8);
  Completion free = referenceCompletion(runner, r, {kEos}, 128);
  std::string expectedText;
  for (int32_t id : free.ids[0])
    if (id != kEos)
      expectedText += "t" + std::to_string(id) + " ";

  EngineConfig noHooks = engineConfig(&runner);
  auto plain = makeCore(noHooks);
  EXPECT_EQ(plain
                ->validate([&] {
                  Request s = r;
                  s.sampling.stop = {"x"};
                  return s;
                }())
                .code(),
            StatusCode::kUnimplemented);
  std::map<RequestId, Completion> noText = runTogether(*plain, {r});
  EXPECT_EQ(noText[1].text[0], "");

  EngineConfig c = engineConfig(&runner);
  c.detokenizer = &detok;
  c.stopStrings = &stops;
  auto core = makeCore(c);
  std::map<RequestId, Completion> withText = runTogether(*core, {r});
  EXPECT_EQ(withText[1].text[0], expectedText);

  ASSERT_GE(free.ids[0].size(), 3u);
  Request stopped = r;
  const std::string third = "t" + std::to_string(free.ids[0][2]) + " ";
  stopped.sampling.stop = {third};
  const size_t cut = expectedText.find(third);
  std::map<RequestId, Completion> got = runTogether(*core, {stopped});
  EXPECT_EQ(got[1].reasons[0], FinishReason::kStop);
  EXPECT_EQ(got[1].text[0], expectedText.substr(0, cut));
  EXPECT_LE(got[1].ids[0].size(), 3u);
}

} // namespace
} // namespace kiln::rt
