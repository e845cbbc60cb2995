// An artifact compiled for cpu,sm_80,sm_90a still runs on the CPU backend, which ignores the
// kernels: its logits equal a cpu-only compile's exactly and match transformers' golden.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

std::vector<float> promptLogits(const std::string &artifactDir, const GoldenCase &gc) {
  LoadedArtifact loaded = loadForTest(artifactDir, 64);
  EXPECT_NE(loaded.executor, nullptr);
  if (!loaded.executor)
    return {};
  rt::SequenceStep step;
  step.tokenIds = gc.promptIds;
  step.tokenIds.insert(step.tokenIds.end(), gc.greedyIds.begin(), gc.greedyIds.end());
  const rt::RunnerLimits &limits = loaded.executor->limits();
  step.blockTables =
      rt::ownBlockTables(limits, 0, (gc.rows + limits.blockSize - 1) / limits.blockSize);
  step.logits = rt::LogitsWanted::kAll;
  auto output = loaded.executor->execute(rt::StepBatch{{step}});
  EXPECT_TRUE(output.isOk()) << output.status().toString();
  if (!output.isOk())
    return {};
  EXPECT_EQ(output->numRows(), gc.rows);
  return std::vector<float>(output->row(0), output->row(0) + size_t(gc.rows) * output->vocabSize);
}

TEST(GpuTargetsCpuTest, CpuBackendIgnoresKernelsAndMatchesGolden) {
#ifndef KILN_HAVE_CODEGEN
  GTEST_SKIP() << "built without the CUDA code generator (KILN_ENABLE_CUDA=OFF)";
#endif
  std::string skipReason;
  std::optional<Golden> golden = loadGolden("tiny-llama", skipReason);
  if (!golden)
    GTEST_SKIP() << skipReason;
  compiler::CompileOptions gpu;
  gpu.targets = {"cpu", "sm_80", "sm_90a"};
  std::string withKernels = compileForTest(golden->modelDir, gpu);
  std::string cpuOnly = compileForTest(golden->modelDir);
  {
    LoadedArtifact loaded = loadForTest(withKernels, 64);
    ASSERT_NE(loaded.artifact, nullptr);
    ASSERT_NE(loaded.artifact->plan().kernel_modules(), nullptr);
    EXPECT_EQ(loaded.artifact->plan().kernel_modules()->size(), 3u);
  }
  for (const GoldenCase &gc : golden->cases) {
    std::vector<float> a = promptLogits(withKernels, gc), b = promptLogits(cpuOnly, gc);
    ASSERT_EQ(a.size(), size_t(gc.rows) * golden->vocabSize);
    ASSERT_EQ(a, b); // bit-identical: the kernels must not change the CPU plan
    EXPECT_LE(maxAbsDiff(a.data(), gc.logits.data(), a.size()), golden->tolerance);
  }
}

} // namespace
} // namespace kiln::e2e
