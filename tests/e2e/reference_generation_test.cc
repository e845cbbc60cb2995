// Long greedy runs checked against references that are not transformers: llama2.c's own output
// for stories260K (200 tokens from BOS) and an independent float64 implementation of HF Llama for
// TinyStories-656K (../shared/assets/expected). Skipped, saying so, when the assets are absent.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

TEST(ReferenceGeneration, Stories260KGreedy200MatchesLlama2c) {
  auto dir = assetModelDir("models/stories260K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/stories260K-hf is absent";
  std::vector<int32_t> expected = llama2cStories260KIds();
  ASSERT_EQ(expected.size(), 200u) << "could not parse section 1 of the llama2.c reference";
  compiler::CompileOptions options;
  options.maxSeqLen = 512;
  LoadedArtifact model = loadForTest(compileForTest(*dir, options), 32);
  ASSERT_NE(model.executor, nullptr);
  EXPECT_EQ(greedyIds(*model.executor, {1}, 200), expected);
}

TEST(ReferenceGeneration, TinyStories656KMatchesFloat64Reference) {
  auto dir = assetModelDir("models/tinystories-656K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/tinystories-656K-hf is absent";
  LoadedArtifact model = loadForTest(compileForTest(*dir), 32);
  ASSERT_NE(model.executor, nullptr);
  checkTinyStoriesFloat64Greedy(*model.executor);
}

} // namespace
} // namespace kiln::e2e
