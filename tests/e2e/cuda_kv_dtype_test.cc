// `kiln compile --kv-dtype` on the CUDA backend: a bf16, fp16 or fp8 E4M3 cache under fp32
// activations, compiled with `--target cpu,<this GPU's SM>` (RopeKvWrite rounds k and v to the
// cache's dtype, the attention kernels widen them: kernels/cuda/rope_kv.cuh, attention_*.cuh),
// against the same transformers goldens as the cpu backend (tests/e2e/kv_golden_util.h: every
// row of the prefill, the teacher-forced decode steps and one prefill of the whole sequence, up
// to rounding flips, and the greedy ids). Label gpu: skips without a device, saying why; ctest's
// cudasim.cuda_kv_dtype_test runs it on the simulator in CI.
#include "tests/e2e/kv_golden_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

void checkOnCuda(const std::string &name, const std::string &model, schema::DType dtype,
                 float flipBound) {
  std::string why;
  std::optional<compiler::CompileOptions> options = cudaCompileOptions(why);
  if (!options)
    GTEST_SKIP() << why;
  checkKvGolden(name, model, dtype, flipBound, kReproducedFraction, "cuda", *options);
}

TEST(CudaKvDtype, Bf16CacheUnderFp32ActivationsMatchesTransformers) {
  checkOnCuda("tiny-llama.kv-bf16", "tiny-llama", schema::DType::BF16, kBf16FlipBound);
}

TEST(CudaKvDtype, Fp16CacheUnderFp32ActivationsMatchesTransformers) {
  checkOnCuda("tiny-llama-tied.kv-fp16", "tiny-llama-tied", schema::DType::F16, kFp16FlipBound);
}

TEST(CudaKvDtype, Fp8CacheUnderFp32ActivationsMatchesTransformers) {
  checkOnCuda("tiny-llama-tied.kv-fp8", "tiny-llama-tied", schema::DType::F8E4M3, kFp8FlipBound);
}

// With a checkpoint's calibrated per-layer k_scale / v_scale (kernels/cuda/common.cuh kvFromFloat
// / kvToFloat), as kv_dtype_test checks on the cpu.
TEST(CudaKvDtype, Fp8CacheWithCalibratedScalesMatchesTransformers) {
  checkOnCuda("tiny-llama-tied.kv-fp8-scaled", "tiny-llama-tied", schema::DType::F8E4M3,
              kFp8FlipBound);
}

} // namespace
} // namespace kiln::e2e
