// The staged communicator on real tensor-parallel artifacts (cpu devices): MultiRankRunner with
// CollectiveBackend::kStaged gives logits bit-identical to the CpuCommunicator's at --tp 2 and 4,
// over steps that mix prefills and decodes. It is what runs when ranks share a GPU, so its math
// must be the cpu communicator's exactly.
#include "runtime/exec/multi_rank_runner.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

// Every golden case's prompt in one step, then its greedy ids teacher-forced, all cases in each
// decode step; returns every step's logits back to back.
std::vector<float> runSteps(rt::ModelRunner &runner, const Golden &golden) {
  const int32_t blockSize = runner.limits().blockSize;
  std::vector<std::vector<int32_t>> blocks;
  int32_t next = 0;
  for (const GoldenCase &gc : golden.cases) {
    blocks.emplace_back();
    for (int32_t b = 0; b * blockSize < gc.rows; ++b)
      blocks.back().push_back(next++);
  }
  std::vector<float> logits;
  for (size_t k = 0;; ++k) {
    rt::StepBatch batch;
    for (size_t i = 0; i < golden.cases.size(); ++i) {
      const GoldenCase &gc = golden.cases[i];
      if (k > gc.greedyIds.size())
        continue;
      rt::SequenceStep seq;
      seq.tokenIds = k == 0 ? gc.promptIds : std::vector<int32_t>{gc.greedyIds[k - 1]};
      seq.startPosition = k == 0 ? 0 : int32_t(gc.promptIds.size() + k - 1);
      seq.blockTables = {blocks[i]};
      seq.logits = rt::LogitsWanted::kAll;
      batch.sequences.push_back(std::move(seq));
    }
    if (batch.sequences.empty())
      return logits;
    auto out = runner.execute(batch);
    EXPECT_TRUE(out.isOk()) << out.status().toString();
    if (!out.isOk())
      return logits;
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
  }
}

void checkStagedEqualsCpu(const std::string &goldenName, int64_t tp) {
  std::string skipReason;
  std::optional<Golden> golden = loadGolden(goldenName, skipReason);
  if (!golden) {
    if (!skipReason.empty())
      GTEST_SKIP() << skipReason;
    FAIL() << "cannot read the golden for " << goldenName;
  }
  compiler::CompileOptions compile;
  compile.tp = tp;
  compile.maxBatch = 8;
  compile.maxSeqLen = 128;
  auto artifact = rt::Artifact::load(compileForTest(golden->modelDir, compile));
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  std::vector<std::vector<float>> logits;
  for (rt::CollectiveBackend backend : {rt::CollectiveBackend::kCpu, rt::CollectiveBackend::kStaged}) {
    rt::MultiRankOptions options;
    options.executor.numKvBlocks = 64;
    options.collectives = backend;
    auto runner = rt::MultiRankRunner::create(**artifact, options);
    ASSERT_TRUE(runner.isOk()) << runner.status().toString();
    ASSERT_EQ((*runner)->collectives(), backend);
    logits.push_back(runSteps(**runner, *golden));
  }
  ASSERT_FALSE(logits[0].empty());
  ASSERT_EQ(logits[0].size(), logits[1].size());
  size_t differing = 0;
  for (size_t i = 0; i < logits[0].size(); ++i)
    differing += logits[0][i] != logits[1][i];
  EXPECT_EQ(differing, 0u) << "of " << logits[0].size() << " logits at --tp " << tp;
}

TEST(TpStaged, TinyLlamaTp2IsBitIdenticalToTheCpuCommunicator) {
  checkStagedEqualsCpu("tiny-llama", 2);
}

TEST(TpStaged, TinyStories656KTp2And4AreBitIdenticalToTheCpuCommunicator) {
  checkStagedEqualsCpu("tinystories-656K", 2);
  checkStagedEqualsCpu("tinystories-656K", 4);
}

} // namespace
} // namespace kiln::e2e
