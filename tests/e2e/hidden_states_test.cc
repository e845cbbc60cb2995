// A generation plan's final hidden states on the cpu (runtime/exec/step.h
// SequenceStep::wantsHidden: the lm_head's input, what an embedding taken from a generation model
// pools) against transformers' last_hidden_state (tools/goldens/make_hidden_state_goldens.py),
// alone and batched; a plan that cannot give them refuses the step naming the sequence.
// cuda_golden_test runs the same check on the CUDA backend.
#include "tests/e2e/hidden_states_util.h"

#include "runtime/engine/engine_core.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

TEST(HiddenStates, TinyLlamaMatchesTransformersAloneAndBatched) {
  checkGoldenHiddenStates("tiny-llama", "cpu");
}

TEST(HiddenStates, AnEmbeddingPlanRefusesToGiveThemTwice) {
  LoadedArtifact loaded = loadForTest(compileForTest(kData + "/models/tiny-bert"), 16);
  ASSERT_TRUE(loaded.executor);
  EXPECT_EQ(loaded.executor->limits().hiddenWidth, 0);
  rt::SequenceStep seq;
  seq.tokenIds = {2, 7, 3};
  seq.blockTables = rt::ownBlockTables(loaded.executor->limits(), 0, 1);
  seq.wantsHidden = true;
  Result<rt::StepOutput> out = loaded.executor->execute({{seq}});
  ASSERT_FALSE(out.isOk());
  EXPECT_NE(out.status().message().find("sequence 0 wants its final hidden states; this plan "
                                        "cannot return them"),
            std::string::npos)
      << out.status().message();
}

// The last row's final hidden state of `ids` computed alone (the executor's, no engine).
std::vector<float> lastHiddenAlone(rt::Executor &executor, const std::vector<int32_t> &ids) {
  rt::SequenceStep seq;
  seq.tokenIds = ids;
  seq.blockTables = rt::ownBlockTables(executor.limits(), 0, 8);
  seq.wantsHidden = true;
  Result<rt::StepOutput> out = executor.execute({{seq}});
  EXPECT_TRUE(out.isOk()) << out.status().toString();
  if (!out.isOk())
    return {};
  return out->hidden;
}

TEST(HiddenStates, EmbeddingRequestsRunInTheEnginesStepsBesideGeneration) {
  std::string skip;
  std::optional<Golden> golden = loadGolden("tiny-llama", skip);
  ASSERT_TRUE(golden) << skip;
  LoadedArtifact loaded = loadForTest(compileForTest(golden->modelDir), 64);
  ASSERT_TRUE(loaded.executor);
  rt::Executor &executor = *loaded.executor;
  for (int32_t budget : {0, 5}) { // the compiled tokens per step; 5: prompts prefilled in chunks
    SCOPED_TRACE("max tokens per step " + std::to_string(budget));
    std::vector<std::vector<float>> expected;
    rt::EngineConfig config;
    config.runner = &executor;
    config.maxTokensPerStep = budget;
    auto core = rt::EngineCore::create(config);
    ASSERT_TRUE(core.isOk()) << core.status().toString();
    // Request 2c embeds case c's prompt and greedy ids; 2c + 1 generates case c's greedy ids.
    for (size_t c = 0; c < golden->cases.size(); ++c) {
      const GoldenCase &gc = golden->cases[c];
      rt::Request embed;
      embed.promptIds = gc.promptIds;
      embed.promptIds.insert(embed.promptIds.end(), gc.greedyIds.begin(), gc.greedyIds.end());
      embed.embed = true;
      expected.push_back(lastHiddenAlone(executor, embed.promptIds));
      (*core)->addRequest(2 * c, embed);
      rt::Request generate;
      generate.promptIds = gc.promptIds;
      generate.sampling.temperature = 0;
      generate.sampling.maxTokens = static_cast<int32_t>(gc.greedyIds.size());
      generate.sampling.ignoreEos = true;
      (*core)->addRequest(2 * c + 1, generate);
    }
    std::map<rt::RequestId, rt::RequestOutput> finished;
    std::map<rt::RequestId, std::vector<int32_t>> generated;
    for (int steps = 0; (*core)->hasWork() && steps < 1000; ++steps) {
      (*core)->step();
      for (rt::RequestOutput &out : (*core)->takeOutputs()) {
        auto &ids = generated[out.requestId];
        ids.insert(ids.end(), out.tokenIds.begin(), out.tokenIds.end());
        if (out.requestFinished)
          finished[out.requestId] = std::move(out);
      }
    }
    ASSERT_EQ(finished.size(), 2 * golden->cases.size());
    for (size_t c = 0; c < golden->cases.size(); ++c) {
      const rt::RequestOutput &embedded = finished.at(2 * c);
      EXPECT_EQ(embedded.finishReason, rt::FinishReason::kStop) << embedded.error.toString();
      EXPECT_TRUE(generated[2 * c].empty());
      EXPECT_EQ(embedded.embedding, expected[c]) << "case " << c;
      EXPECT_EQ(embedded.usage.completionTokens, 0);
      EXPECT_EQ(embedded.usage.promptTokens,
                static_cast<int32_t>(golden->cases[c].promptIds.size() +
                                     golden->cases[c].greedyIds.size()));
      EXPECT_EQ(generated[2 * c + 1], golden->cases[c].greedyIds) << "case " << c;
    }
  }
}

TEST(HiddenStates, AnEmbeddingRequestTakesOneSample) {
  LoadedArtifact loaded = loadForTest(compileForTest(kData + "/models/tiny-llama"), 16);
  ASSERT_TRUE(loaded.executor);
  rt::EngineConfig config;
  config.runner = loaded.executor.get();
  auto core = rt::EngineCore::create(config);
  ASSERT_TRUE(core.isOk());
  rt::Request request;
  request.promptIds = {1, 5, 9};
  request.embed = true;
  request.sampling.n = 2;
  EXPECT_EQ((*core)->validate(request).message(),
            "an embedding request takes one sample and no structured output");
}

} // namespace
} // namespace kiln::e2e
