// Shared helpers for engine tests: a small fake model, request builders, output collection, and a
// reference generator that computes what one sample must produce by running the FakeRunner's
// logits and the sampler directly, one token at a time, with no batching, paging or scheduling.
#pragma once

#include "runtime/engine/engine_core.h"
#include "runtime/engine/fake_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

namespace kiln::rt::testing {

constexpr int32_t kEos = 0;

inline RunnerLimits testLimits() {
  RunnerLimits l;
  l.maxBatch = 8;
  l.maxTokensPerStep = 64;
  l.maxSeqLen = 128;
  l.maxBlocksPerSeq = 32;
  l.blockSize = 4;
  l.numKvBlocks = 256;
  l.vocabSize = 64;
  return l;
}

inline FakeRunnerConfig fakeConfig(RunnerLimits limits = testLimits()) {
  FakeRunnerConfig c;
  c.limits = limits;
  c.seed = 11;
  c.eosTokenIds = {kEos};
  c.eosLogitBoost = 1.0f;
  return c;
}

inline EngineConfig engineConfig(ModelRunner *runner) {
  EngineConfig c;
  c.runner = runner;
  c.eosTokenIds = {kEos};
  c.seed = 5;
  return c;
}

inline Request makeRequest(std::vector<int32_t> prompt, uint64_t seed, float temperature = 1.0f,
                           std::optional<int32_t> maxTokens = 24) {
  Request r;
  r.promptIds = std::move(prompt);
  r.sampling.seed = seed;
  r.sampling.temperature = temperature;
  r.sampling.maxTokens = maxTokens;
  return r;
}

// n ids counting up from `from`, wrapping every `period`: a prompt that varies but repeats.
inline std::vector<int32_t> rampPrompt(int32_t n, int32_t from, int32_t period) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i)
    ids[i] = from + i % period;
  return ids;
}

inline std::vector<int32_t> randomPrompt(std::mt19937 &rng, int32_t minLen, int32_t maxLen) {
  std::vector<int32_t> ids(std::uniform_int_distribution<int32_t>(minLen, maxLen)(rng));
  for (int32_t &id : ids)
    id = std::uniform_int_distribution<int32_t>(1, 63)(rng);
  return ids;
}

struct Completion {
  std::vector<std::vector<int32_t>> ids; // per sample
  std::vector<FinishReason> reasons;     // per sample
  std::vector<std::string> text;         // per sample
  std::vector<std::vector<TokenLogprobs>> logprobs;
  Usage usage;
  Status error;
  bool finished = false;
  int32_t outputsAfterFinish = 0;

  void resize(size_t n) {
    ids.resize(std::max(ids.size(), n));
    reasons.resize(ids.size(), FinishReason::kNone);
    text.resize(ids.size());
    logprobs.resize(ids.size());
  }
};

inline void collect(const std::vector<RequestOutput> &outputs,
                    std::map<RequestId, Completion> &into) {
  for (const RequestOutput &o : outputs) {
    Completion &c = into[o.requestId];
    if (c.finished)
      c.outputsAfterFinish++;
    c.resize(o.index + 1);
    c.ids[o.index].insert(c.ids[o.index].end(), o.tokenIds.begin(), o.tokenIds.end());
    c.text[o.index] += o.text;
    c.logprobs[o.index].insert(c.logprobs[o.index].end(), o.logprobs.begin(), o.logprobs.end());
    if (o.finishReason != FinishReason::kNone) {
      EXPECT_EQ(c.reasons[o.index], FinishReason::kNone) << "sample finished twice";
      c.reasons[o.index] = o.finishReason;
    }
    if (!o.error.isOk())
      c.error = o.error;
    if (o.requestFinished) {
      c.finished = true;
      c.usage = o.usage;
    }
  }
}

// What sample `index` of `request` must produce (the request must carry a seed).
inline Completion referenceCompletion(const FakeRunner &runner, const Request &request,
                                      const std::vector<int32_t> &eosIds, int32_t maxSeqLen,
                                      int32_t index = 0) {
  const SamplingParams &p = request.sampling;
  std::vector<int32_t> stopIds = p.stopTokenIds;
  if (!p.ignoreEos)
    stopIds.insert(stopIds.end(), eosIds.begin(), eosIds.end());
  std::vector<int32_t> tokens = request.promptIds;
  const size_t promptLen = tokens.size();
  Rng rng = rngForSample(*p.seed, index);
  std::vector<float> logits(runner.limits().vocabSize);
  Completion c;
  c.resize(1);
  for (int32_t generated = 0;;) {
    runner.logitsFor(tokens, logits);
    SamplingHistory h;
    h.promptIds = std::span<const int32_t>(tokens).first(promptLen);
    h.outputIds = std::span<const int32_t>(tokens).subspan(promptLen);
    if (generated < p.minTokens)
      h.suppressedIds = stopIds;
    Result<SampledToken> t = sampleToken(logits, p, h, rng);
    EXPECT_TRUE(t.isOk());
    tokens.push_back(t->tokenId);
    c.ids[0].push_back(t->tokenId);
    if (t->logprobs)
      c.logprobs[0].push_back(*t->logprobs);
    ++generated;
    if (std::find(stopIds.begin(), stopIds.end(), t->tokenId) != stopIds.end()) {
      c.reasons[0] = FinishReason::kStop;
      break;
    }
    if ((p.maxTokens && generated >= *p.maxTokens) ||
        static_cast<int32_t>(tokens.size()) >= maxSeqLen) {
      c.reasons[0] = FinishReason::kLength;
      break;
    }
  }
  return c;
}

// Adds all requests (ids 1..n) at once and steps until done.
inline std::map<RequestId, Completion>
runTogether(EngineCore &core, const std::vector<Request> &requests, int32_t maxSteps = 100000) {
  std::map<RequestId, Completion> out;
  for (size_t i = 0; i < requests.size(); ++i)
    core.addRequest(i + 1, requests[i]);
  for (int32_t s = 0; s < maxSteps && core.hasWork(); ++s)
    core.step();
  EXPECT_FALSE(core.hasWork());
  collect(core.takeOutputs(), out);
  return out;
}

inline std::unique_ptr<EngineCore> makeCore(const EngineConfig &config) {
  Result<std::unique_ptr<EngineCore>> core = EngineCore::create(config);
  EXPECT_TRUE(core.isOk()) << core.status().toString();
  return std::move(core).value();
}

} // namespace kiln::rt::testing
