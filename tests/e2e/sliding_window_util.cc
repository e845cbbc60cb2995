#include "tests/e2e/sliding_window_util.h"

#include "runtime/engine/engine_core.h"
#include "runtime/kv/kv_cache_manager.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace kiln::e2e {
namespace {

constexpr int32_t kChunk = 5; // max tokens per step: prompts are prefilled in chunks
constexpr float kLogprobTol = 1e-4f;

struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  int32_t cachedPromptTokens = 0;
};

rt::Request greedyRequest(const GoldenCase &gc) {
  rt::Request request;
  request.promptIds = gc.promptIds;
  request.sampling.temperature = 0;
  request.sampling.maxTokens = static_cast<int32_t>(gc.greedyIds.size());
  request.sampling.logprobs = 0;
  request.sampling.ignoreEos = true;
  return request;
}

// Runs `requests` together to completion; also reports the most KV blocks in use at once.
std::vector<Generated> runAll(rt::EngineCore &core, const std::vector<rt::Request> &requests,
                              rt::RequestId firstId, int32_t &peakBlocks) {
  std::vector<Generated> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    core.addRequest(firstId + i, requests[i]);
  for (int guard = 0; core.hasWork() && guard < 10000; ++guard) {
    core.step();
    peakBlocks = std::max(peakBlocks, core.kvCache().pool().numUsedBlocks());
    for (rt::RequestOutput &o : core.takeOutputs()) {
      EXPECT_NE(o.finishReason, rt::FinishReason::kError) << o.error.toString();
      Generated &g = out.at(o.requestId - firstId);
      g.ids.insert(g.ids.end(), o.tokenIds.begin(), o.tokenIds.end());
      for (const rt::TokenLogprobs &lp : o.logprobs)
        g.logprobs.push_back(lp.sampled.logprob);
      if (o.requestFinished)
        g.cachedPromptTokens = o.usage.cachedPromptTokens;
    }
  }
  EXPECT_FALSE(core.hasWork());
  return out;
}

// log softmax of golden row `row` at `id`, in double.
double goldenLogprob(const Golden &golden, const GoldenCase &gc, int32_t row, int32_t id) {
  const float *logits = gc.logits.data() + size_t(row) * golden.vocabSize;
  const double max = *std::max_element(logits, logits + golden.vocabSize);
  double sum = 0;
  for (int32_t v = 0; v < golden.vocabSize; ++v)
    sum += std::exp(double(logits[v]) - max);
  return double(logits[id]) - max - std::log(sum);
}

void expectGolden(const Golden &golden, const GoldenCase &gc, const Generated &got,
                  const std::string &what) {
  ASSERT_EQ(got.ids, gc.greedyIds) << what;
  ASSERT_EQ(got.logprobs.size(), gc.greedyIds.size()) << what;
  const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
  for (size_t k = 0; k < gc.greedyIds.size(); ++k)
    EXPECT_NEAR(got.logprobs[k],
                goldenLogprob(golden, gc, prompt - 1 + int32_t(k), gc.greedyIds[k]), kLogprobTol)
        << what << " token " << k;
}

std::unique_ptr<rt::EngineCore> makeCore(rt::ModelRunner &runner, int32_t numKvBlocks) {
  rt::EngineConfig config;
  config.runner = &runner;
  config.numKvBlocks = numKvBlocks;
  config.maxTokensPerStep = kChunk;
  config.enablePrefixCaching = true;
  auto core = rt::EngineCore::create(config);
  EXPECT_TRUE(core.isOk()) << core.status().toString();
  return core.isOk() ? std::move(*core) : nullptr;
}

} // namespace

void checkSlidingWindowEngine(const std::string &name, const std::string &device,
                              compiler::CompileOptions options) {
  std::string skipReason;
  std::optional<Golden> golden = loadGolden(name, skipReason);
  ASSERT_TRUE(golden) << skipReason;
  options.kvBlockSize = 4;
  options.maxBatch = 4;
  options.maxSeqLen = 64;
  LoadedArtifact loaded = loadForTest(compileForTest(golden->modelDir, options), 256, device);
  ASSERT_NE(loaded.executor, nullptr);
  rt::ModelRunner &runner = *loaded.executor;
  const rt::RunnerLimits &limits = runner.limits();
  ASSERT_FALSE(limits.kvGroupWindows.empty()) << name << " compiled without KV cache groups";

  // The pool holds exactly what the longest case needs with windows, less than without them.
  int32_t longest = 0;
  for (const GoldenCase &gc : golden->cases)
    longest = std::max(longest, gc.rows);
  rt::KvCacheConfig kv{0, limits.blockSize, limits.maxBlocksPerSeq, true, limits.kvGroupWindows};
  const int32_t pool = rt::peakBlocksOfSequence(kv, longest, kChunk);
  const int32_t withoutWindows =
      rt::kvGroupCount(limits) * ((longest + limits.blockSize - 1) / limits.blockSize);
  ASSERT_LT(pool, withoutWindows) << name;

  std::unique_ptr<rt::EngineCore> small = makeCore(runner, pool);
  ASSERT_NE(small, nullptr);
  rt::RequestId id = 1;
  for (size_t i = 0; i < golden->cases.size(); ++i) {
    int32_t peak = 0;
    std::vector<Generated> got = runAll(*small, {greedyRequest(golden->cases[i])}, id++, peak);
    expectGolden(*golden, golden->cases[i], got[0],
                 name + " on " + device + " case " + std::to_string(i) + " alone in a pool of " +
                     std::to_string(pool) + " blocks");
    EXPECT_LE(peak, pool);
  }

  // All cases together, then again: the second round starts from prefix-cache hits whose
  // sliding-window groups bring only their last window's blocks.
  std::unique_ptr<rt::EngineCore> shared = makeCore(runner, 128);
  ASSERT_NE(shared, nullptr);
  std::vector<rt::Request> requests;
  for (const GoldenCase &gc : golden->cases)
    requests.push_back(greedyRequest(gc));
  for (int round = 0; round < 2; ++round) {
    int32_t peak = 0;
    std::vector<Generated> got = runAll(*shared, requests, id, peak);
    id += requests.size();
    int32_t cached = 0;
    for (size_t i = 0; i < golden->cases.size(); ++i) {
      expectGolden(*golden, golden->cases[i], got[i],
                   name + " case " + std::to_string(i) + " batched, round " +
                       std::to_string(round));
      cached += got[i].cachedPromptTokens;
    }
    if (round == 1)
      EXPECT_GT(cached, 0) << name << ": the second round found no cached prefix";
  }
}

} // namespace kiln::e2e
