// The greedy-sampling kernel (kernels/cuda/sampling.cuh) against its definition: per row the
// lowest id among the largest finite logits, -1 when none is finite. Rows 1..17, vocab sizes
// around the CTA's stride (1, 7, 1000, 1024, 1025) and Llama 3's 128256, with planted ties (the
// lower id must win wherever the copies sit), NaN and +-inf that must never win, and all-NaN /
// all -inf rows. Label gpu: skips without a device.
#include "compiler/codegen/kernel_catalog.h"
#include "kernels/cuda/params.h"
#include "runtime/sampling/sampler.h"
#include "tests/kernels/cuda/gpu_harness.h"

#include <cstring>
#include <limits>

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;

KernelInstance argmaxInstance() {
  return compiler::makeKernelInstance("argmax_rows",
                                      {{"threads", std::to_string(kc::kArgmaxThreads)}});
}

// Random rows with the hard cases planted by row index.
std::vector<float> plantedLogits(int32_t rows, int32_t vocab, uint32_t seed) {
  std::vector<float> x = randomValues(size_t(rows) * vocab, seed, "f32", -10.0f, 10.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int32_t r = 0; r < rows; ++r) {
    float *row = x.data() + size_t(r) * vocab;
    switch (r % 6) {
    case 1: // a tie at the top: first copy late, second copy early
      row[vocab - 1] = 50.0f;
      row[vocab / 3] = 50.0f;
      break;
    case 2: // NaN and +inf above every finite value
      row[0] = nan;
      row[vocab / 2] = inf;
      row[vocab - 1] = 20.0f;
      break;
    case 3: // nothing finite
      for (int32_t i = 0; i < vocab; ++i)
        row[i] = i % 2 ? nan : -inf;
      break;
    case 4: // every value equal: id 0
      for (int32_t i = 0; i < vocab; ++i)
        row[i] = 3.0f;
      break;
    default:
      break;
    }
  }
  return x;
}

TEST(CudaArgmax, MatchesTheDefinitionOverRowsAndVocabSizes) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load({argmaxInstance()}).isOk());
  uint32_t seed = 1;
  for (int32_t vocab : {1, 7, 1000, 1024, 1025, 128256})
    for (int32_t rows : {1, 6, 17}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + ", rows " + std::to_string(rows));
      const std::vector<float> x = plantedLogits(rows, vocab, seed++);
      void *dx = gpu->uploadPod(x);
      void *dids = gpu->alloc(sizeof(int32_t) * rows);
      kc::ArgmaxRowsParams p{static_cast<const float *>(dx), static_cast<int32_t *>(dids), rows,
                             vocab};
      ASSERT_TRUE(gpu->launch(argmaxInstance().symbol, rows, 1, 1, kc::kArgmaxThreads, p).isOk());
      const std::vector<uint8_t> bytes = gpu->download(dids, sizeof(int32_t) * rows);
      for (int32_t r = 0; r < rows; ++r) {
        int32_t got = 0;
        std::memcpy(&got, bytes.data() + sizeof(int32_t) * r, sizeof(got));
        EXPECT_EQ(got, rt::argmaxToken({x.data() + size_t(r) * vocab, size_t(vocab)}))
            << "row " << r;
      }
    }
}

TEST(CudaArgmax, TheRuntimeFindsTheCompilersInstanceByName) {
  EXPECT_EQ(argmaxInstance().symbol, kc::kArgmaxRowsSymbol);
  auto shape = compiler::launchShapeOf(argmaxInstance());
  ASSERT_TRUE(shape.isOk()) << shape.status().toString();
  EXPECT_EQ(shape->threads, kc::kArgmaxThreads);
  EXPECT_EQ(shape->gridY, 1);
}

} // namespace
} // namespace kiln::testing
