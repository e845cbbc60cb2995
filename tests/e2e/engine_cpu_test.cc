// The engine on the real CPU backend (compiled plan -> executor -> EngineCore / Engine): whatever
// the engine does to fit requests together — batching, preemption by recompute, chunked prefill,
// prefix-cache hits, forking parallel samples — each request's tokens must equal that request run
// alone. Exact token ids; the runs differ only in scheduling, never in arithmetic per sequence.
#include "runtime/engine/engine_core.h"
#include "runtime/sampling/rng.h"
#include "runtime/service/serving_model.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

namespace kiln::e2e {
namespace {

using Ids = std::vector<int32_t>;

constexpr int32_t kCompiledMaxBatch = 16;
constexpr int32_t kCompiledMaxSeqLen = 128;
constexpr int32_t kExecutorKvBlocks = 256;

struct ModelUnderTest {
  std::string artifactDir;
  LoadedArtifact loaded; // one executor per model; each EngineCore takes a slice of its pool
};

// Compiles and loads each model once per process: compiling is the slow part of these tests.
ModelUnderTest *modelFor(const std::string &name, std::string &skipReason) {
  static std::map<std::string, std::unique_ptr<ModelUnderTest>> models;
  auto it = models.find(name);
  if (it != models.end())
    return it->second.get();
  std::string dir;
  if (name == "tinystories-656K") {
    std::optional<std::string> asset = assetModelDir("models/tinystories-656K-hf");
    if (!asset) {
      skipReason = "../shared/assets/models/tinystories-656K-hf is absent on this machine";
      return nullptr;
    }
    dir = *asset;
  } else {
    dir = std::string(KILN_TEST_DATA_DIR) + "/models/" + name;
  }
  compiler::CompileOptions options;
  options.maxBatch = kCompiledMaxBatch;
  options.maxSeqLen = kCompiledMaxSeqLen;
  auto model = std::make_unique<ModelUnderTest>();
  model->artifactDir = compileForTest(dir, options);
  model->loaded = loadForTest(model->artifactDir, kExecutorKvBlocks);
  if (!model->loaded.executor)
    return nullptr;
  return models.emplace(name, std::move(model)).first->second.get();
}

struct CoreOptions {
  std::vector<int32_t> eosTokenIds;
  int32_t numKvBlocks = kExecutorKvBlocks;
  int32_t maxTokensPerStep = 0; // 0: compiled maximum
  bool prefixCaching = true;
};

// What one drive of the engine to completion observed.
struct RunResult {
  std::vector<std::vector<Ids>> tokens; // [request][sample] -> generated ids
  std::vector<rt::Usage> usage;
  int32_t peakKvBlocks = 0;
  int32_t maxSequencesInStep = 0;
  int32_t partialPrefillChunks = 0; // prefill chunks that stopped short of the sequence's end
  rt::MetricsSnapshot metrics;
};

class CoreRun {
public:
  CoreRun(rt::ModelRunner &runner, const CoreOptions &options) {
    rt::EngineConfig config;
    config.runner = &runner;
    config.eosTokenIds = options.eosTokenIds;
    config.numKvBlocks = options.numKvBlocks;
    config.maxTokensPerStep = options.maxTokensPerStep;
    config.enablePrefixCaching = options.prefixCaching;
    config.seed = 99;
    auto core = rt::EngineCore::create(config);
    EXPECT_TRUE(core.isOk()) << core.status().toString();
    if (core.isOk())
      core_ = std::move(*core);
  }

  rt::EngineCore &core() { return *core_; }

  // Adds every request before the first step, so they are scheduled together.
  RunResult run(const std::vector<rt::Request> &requests) {
    RunResult result;
    result.tokens.resize(requests.size());
    result.usage.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      result.tokens[i].resize(requests[i].sampling.n);
      core_->addRequest(nextId_ + i, requests[i]);
    }
    collect(result);
    for (int guard = 0; core_->hasWork() && guard < 100000; ++guard) {
      core_->step();
      const rt::SchedulerOutput &plan = core_->lastSchedule();
      result.maxSequencesInStep =
          std::max(result.maxSequencesInStep, static_cast<int32_t>(plan.chunks.size()));
      for (const rt::ScheduledChunk &chunk : plan.chunks)
        result.partialPrefillChunks += chunk.wantsLogits ? 0 : 1;
      result.peakKvBlocks =
          std::max(result.peakKvBlocks, core_->kvCache().pool().numUsedBlocks());
      collect(result);
    }
    EXPECT_FALSE(core_->hasWork()) << "the engine did not finish";
    nextId_ += requests.size();
    result.metrics = core_->metrics().snapshot();
    return result;
  }

private:
  void collect(RunResult &result) {
    for (rt::RequestOutput &out : core_->takeOutputs()) {
      const size_t i = out.requestId - nextId_;
      EXPECT_NE(out.finishReason, rt::FinishReason::kError) << out.error.toString();
      Ids &ids = result.tokens.at(i).at(out.index);
      ids.insert(ids.end(), out.tokenIds.begin(), out.tokenIds.end());
      if (out.requestFinished)
        result.usage[i] = out.usage;
    }
  }

  std::unique_ptr<rt::EngineCore> core_;
  rt::RequestId nextId_ = 1;
};

Ids randomIds(std::mt19937 &rng, int32_t count, int32_t vocab) {
  Ids ids(count);
  for (int32_t &id : ids)
    id = 3 + static_cast<int32_t>(rng() % (vocab - 3)); // no BOS/EOS/unk
  return ids;
}

// 16 prompts from 1 to 70 tokens: one-token prompts, exact block multiples, and ones that span
// several blocks, so batches mix short and long prefills with decodes.
std::vector<Ids> sixteenPrompts(int32_t vocab) {
  std::mt19937 rng(20240611);
  std::vector<Ids> prompts;
  for (int32_t len : {1, 2, 3, 5, 7, 9, 12, 15, 16, 17, 23, 31, 32, 33, 48, 70})
    prompts.push_back(randomIds(rng, len, vocab));
  std::shuffle(prompts.begin(), prompts.end(), rng);
  return prompts;
}

rt::Request greedy(Ids prompt, int32_t maxTokens) {
  rt::Request request;
  request.promptIds = std::move(prompt);
  request.sampling.temperature = 0;
  request.sampling.maxTokens = maxTokens;
  return request;
}

rt::Request seeded(Ids prompt, uint64_t seed, int32_t maxTokens, int32_t n = 1) {
  rt::Request request;
  request.promptIds = std::move(prompt);
  request.sampling.temperature = 0.8f;
  request.sampling.topP = 0.9f;
  request.sampling.seed = seed;
  request.sampling.maxTokens = maxTokens;
  request.sampling.ignoreEos = true; // equal lengths, so a different seed must show in the ids
  request.sampling.n = n;
  return request;
}

// Each request on its own, one after another, with no prefix cache: the reference outputs.
std::vector<Ids> runAlone(rt::ModelRunner &runner, const std::vector<int32_t> &eos,
                          const std::vector<rt::Request> &requests) {
  CoreRun alone(runner, {.eosTokenIds = eos, .prefixCaching = false});
  std::vector<Ids> out;
  for (const rt::Request &request : requests) {
    RunResult r = alone.run({request});
    EXPECT_EQ(r.maxSequencesInStep, 1);
    out.push_back(r.tokens.at(0).at(0));
  }
  return out;
}

void expectSameTokens(const std::vector<Ids> &alone, const RunResult &together) {
  ASSERT_EQ(alone.size(), together.tokens.size());
  size_t generated = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_FALSE(alone[i].empty()) << "request " << i;
    EXPECT_EQ(together.tokens[i].at(0), alone[i]) << "request " << i;
    generated += alone[i].size();
  }
  // Most requests run to max_tokens rather than stopping at eos, so the comparison has substance.
  EXPECT_GE(generated, alone.size() * 24 * 3 / 4);
}

class EngineCpuTest : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    std::string skip;
    model_ = modelFor(GetParam(), skip);
    if (!model_ && !skip.empty())
      GTEST_SKIP() << skip;
    ASSERT_NE(model_, nullptr);
    vocab_ = runner().limits().vocabSize;
    if (const auto *eos = model_->loaded.artifact->plan().model()->eos_token_ids())
      eos_.assign(eos->begin(), eos->end());
  }
  CoreOptions withEos(CoreOptions options) const {
    options.eosTokenIds = eos_;
    return options;
  }
  rt::ModelRunner &runner() { return *model_->loaded.executor; }

  std::vector<rt::Request> greedyRequests(int32_t maxTokens) {
    std::vector<rt::Request> requests;
    for (Ids &prompt : sixteenPrompts(vocab_))
      requests.push_back(greedy(std::move(prompt), maxTokens));
    return requests;
  }

  ModelUnderTest *model_ = nullptr;
  int32_t vocab_ = 0;
  std::vector<int32_t> eos_;
};

TEST_P(EngineCpuTest, GreedySixteenTogetherEqualEachAlone) {
  std::vector<rt::Request> requests = greedyRequests(24);
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  CoreRun together(runner(), withEos({}));
  RunResult r = together.run(requests);
  expectSameTokens(alone, r);
  EXPECT_EQ(r.maxSequencesInStep, 16);
  EXPECT_EQ(r.metrics.preemptions, 0u);
  EXPECT_EQ(r.metrics.requestsFinished, 16u);
}

TEST_P(EngineCpuTest, GreedyUnderPreemptionEqualsAlone) {
  std::vector<rt::Request> requests = greedyRequests(24);
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  // 12 blocks of 16 tokens hold the longest request (70 + 24 tokens) but not the batch.
  CoreRun small(runner(), withEos({.numKvBlocks = 12}));
  RunResult r = small.run(requests);
  expectSameTokens(alone, r);
  EXPECT_GT(r.metrics.preemptions, 0u);
  EXPECT_LE(r.peakKvBlocks, 12);
  // Recompute re-runs preempted tokens: more computed than prompt + generated - 1 per request.
  uint64_t minimum = 0;
  for (size_t i = 0; i < requests.size(); ++i)
    minimum += requests[i].promptIds.size() + alone[i].size() - 1;
  EXPECT_GT(r.metrics.computedTokens, minimum);
}

TEST_P(EngineCpuTest, GreedyWithChunkedPrefillEqualsAlone) {
  std::vector<rt::Request> requests = greedyRequests(24);
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  CoreRun chunked(runner(), withEos({.maxTokensPerStep = 16}));
  RunResult r = chunked.run(requests);
  expectSameTokens(alone, r);
  EXPECT_GT(r.partialPrefillChunks, 0);
  EXPECT_EQ(chunked.core().limits().maxTokensPerStep, 16);
}

TEST_P(EngineCpuTest, GreedyWithPreemptionAndChunkedPrefillEqualsAlone) {
  std::vector<rt::Request> requests = greedyRequests(24);
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  CoreRun both(runner(), withEos({.numKvBlocks = 12, .maxTokensPerStep = 16}));
  RunResult r = both.run(requests);
  expectSameTokens(alone, r);
  EXPECT_GT(r.metrics.preemptions, 0u);
  EXPECT_GT(r.partialPrefillChunks, 0);
}

TEST_P(EngineCpuTest, PrefixCacheHitGivesSameTokensWithFewerComputed) {
  std::mt19937 rng(7);
  Ids prompt = randomIds(rng, 50, vocab_); // 3 full blocks + 2 tokens
  Ids sharesTwoBlocks(prompt.begin(), prompt.begin() + 40);
  for (int32_t id : randomIds(rng, 9, vocab_))
    sharesTwoBlocks.push_back(id);
  std::vector<Ids> alone = runAlone(runner(), eos_, {greedy(prompt, 20), greedy(sharesTwoBlocks, 20)});

  CoreRun cached(runner(), withEos({}));
  RunResult first = cached.run({greedy(prompt, 20)});
  RunResult again = cached.run({greedy(prompt, 20)});
  RunResult partial = cached.run({greedy(sharesTwoBlocks, 20)});
  EXPECT_EQ(first.tokens[0][0], alone[0]);
  EXPECT_EQ(again.tokens[0][0], alone[0]);
  EXPECT_EQ(partial.tokens[0][0], alone[1]);
  EXPECT_EQ(first.usage[0].cachedPromptTokens, 0);
  EXPECT_EQ(again.usage[0].cachedPromptTokens, 48);
  EXPECT_EQ(partial.usage[0].cachedPromptTokens, 32);
  // Metrics are cumulative: each run's computed tokens are the difference.
  const uint64_t computedFirst = first.metrics.computedTokens;
  const uint64_t computedAgain = again.metrics.computedTokens - computedFirst;
  // The prompt, then one decode per generated token after the first.
  EXPECT_EQ(computedFirst, 50 + alone[0].size() - 1);
  EXPECT_EQ(computedAgain, computedFirst - 48);
  EXPECT_EQ(partial.metrics.computedTokens - again.metrics.computedTokens,
            49 - 32 + alone[1].size() - 1);
  EXPECT_EQ(partial.metrics.cachedTokens, 48u + 32u);
}

TEST_P(EngineCpuTest, SeededSamplingAloneEqualsBatchedAndDependsOnSeed) {
  std::vector<Ids> prompts = sixteenPrompts(vocab_);
  std::vector<rt::Request> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    // A mix: seeded samplers with distinct seeds among greedy and unseeded requests.
    if (i % 4 == 3)
      requests.push_back(greedy(prompts[i], 20));
    else
      requests.push_back(seeded(prompts[i], 1000 + i, 20));
  }
  requests[5].sampling.seed.reset();
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  CoreRun batched(runner(), withEos({.numKvBlocks = 24, .maxTokensPerStep = 32}));
  RunResult r = batched.run(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 5)
      continue; // unseeded: the engine picks a seed, nothing to compare
    EXPECT_EQ(r.tokens[i][0], alone[i]) << "request " << i;
  }
  // The same prompt with another seed samples another sequence.
  rt::Request other = requests[0];
  other.sampling.seed = 4321;
  std::vector<Ids> otherAlone = runAlone(runner(), eos_, {other, requests[0]});
  EXPECT_NE(otherAlone[0], alone[0]);
  EXPECT_EQ(otherAlone[1], alone[0]);
}

// rngForSample(seed, i) is Rng(seed ^ k * i), which is sample 0 of a request seeded that way.
uint64_t seedOfSample(uint64_t seed, int32_t index) {
  return seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(index));
}

TEST_P(EngineCpuTest, ParallelSamplesShareThePromptAndEqualSeededSingles) {
  std::mt19937 rng(11);
  const Ids prompt = randomIds(rng, 40, vocab_); // 2 full blocks + 8 tokens
  constexpr uint64_t kSeed = 555;
  constexpr int32_t kTokens = 16;
  CoreRun forked(runner(), withEos({}));
  RunResult n4 = forked.run({seeded(prompt, kSeed, kTokens, 4)});
  ASSERT_EQ(n4.tokens[0].size(), 4u);
  EXPECT_EQ(n4.usage[0].completionTokens, 4 * kTokens);

  std::vector<rt::Request> singles;
  for (int32_t i = 0; i < 4; ++i)
    singles.push_back(seeded(prompt, seedOfSample(kSeed, i), kTokens));
  CoreRun separate(runner(), withEos({}));
  RunResult four = separate.run(singles);
  std::vector<Ids> alone = runAlone(runner(), eos_, singles);
  for (int32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(n4.tokens[0][i], alone[i]) << "sample " << i;
    EXPECT_EQ(four.tokens[i][0], alone[i]) << "request " << i;
  }
  EXPECT_NE(n4.tokens[0][0], n4.tokens[0][1]);
  // 56 tokens = 4 blocks per sequence; the forks share the prompt's 2 full blocks.
  EXPECT_EQ(four.peakKvBlocks, 4 * 4);
  EXPECT_EQ(n4.peakKvBlocks, 2 + 4 * 2);
}

// The whole serving assembly (ServingModel: artifact -> device -> executor -> threaded Engine)
// with a KV pool too small for the batch, fed from four threads at once.
TEST_P(EngineCpuTest, ServingModelFromFourThreadsEqualsAlone) {
  std::vector<rt::Request> requests = greedyRequests(24);
  std::vector<Ids> alone = runAlone(runner(), eos_, requests);
  rt::ServingOptions options;
  options.kvCacheBytes = 12 * model_->loaded.executor->kvBlockBytes();
  auto model = rt::ServingModel::open(model_->artifactDir, options);
  ASSERT_TRUE(model.isOk()) << model.status().toString();
  rt::Engine &engine = (*model)->engine();
  EXPECT_EQ(engine.limits().numKvBlocks, 12);
  std::vector<Ids> got(requests.size());
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::vector<std::pair<size_t, rt::RequestHandle>> handles;
      for (size_t i = t; i < requests.size(); i += 4) {
        auto handle = engine.submit(requests[i]);
        ASSERT_TRUE(handle.isOk()) << handle.status().toString();
        handles.emplace_back(i, *handle);
      }
      for (auto &[i, handle] : handles)
        while (auto out = handle.stream->next())
          got[i].insert(got[i].end(), out->tokenIds.begin(), out->tokenIds.end());
    });
  }
  for (std::thread &client : clients)
    client.join();
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(got[i], alone[i]) << "request " << i;
  EXPECT_EQ(engine.metrics().requestsFinished, 16u);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineCpuTest,
                         ::testing::Values("tiny-llama", "tiny-llama3", "tinystories-656K"),
                         [](const auto &info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

} // namespace
} // namespace kiln::e2e
