// Quantized weights on the CUDA backend (kernels/cuda/quant.cuh, runtime/hal/cuda/
// cuda_quant_linear.h): every quantized fixture compiled with `--target cpu,<this GPU's SM>` keeps
// its packed weights (the same bytes as a cpu-only compile) and runs on cuda against
// transformers on the same quantized weights: logits within 1e-4 at every prompt position and 16
// greedy steps, the prompt in chunks and after a prefix-cache hit. Decode steps and chunks of at
// most 8 tokens run the GEMV on the packed bytes, longer prefills the tile GEMM (KILN_QUANT_GEMM=
// tiles; two fixtures also with W dequantized for cuBLASLt), the tied or untied table the
// quantized embedding, quantized experts the grouped MoE kernels. Label
// gpu: skips without a device, saying why; ctest's cudasim.cuda_quantized_test runs it on the
// simulator in CI.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

// KILN_QUANT_GEMM (runtime/hal/cuda/cuda_quant_linear.h) for the CUDA devices made while it
// lives, restored afterwards.
class QuantGemmEnvironment {
public:
  explicit QuantGemmEnvironment(const char *mode) {
    if (const char *value = std::getenv("KILN_QUANT_GEMM"))
      saved_ = value;
    setenv("KILN_QUANT_GEMM", mode, 1);
  }
  ~QuantGemmEnvironment() {
    if (saved_)
      setenv("KILN_QUANT_GEMM", saved_->c_str(), 1);
    else
      unsetenv("KILN_QUANT_GEMM");
  }

private:
  std::optional<std::string> saved_;
};

// `source` is what the golden compiles (a model directory or a GGUF file), `format` one of its
// weights' "Q4 g32"-style names that must survive the GPU compile, `count` how many; prefills of
// more than 8 tokens run as each of `modes` says.
void checkQuantized(const char *golden, const std::string &source, compiler::CompileOptions extra,
                    const std::string &format, int count, int32_t chunk,
                    std::vector<const char *> modes = {"tiles"}) {
  std::string why;
  std::optional<compiler::CompileOptions> options = cudaCompileOptions(why);
  if (!options)
    GTEST_SKIP() << why;
  options->quantize = extra.quantize;
  WeightFormats formats = weightFormats(compileForTest(source, *options));
  EXPECT_EQ(formats.count[format], count) << "the GPU compile should keep " << format;
  for (const char *mode : modes) {
    SCOPED_TRACE(std::string("KILN_QUANT_GEMM=") + mode);
    QuantGemmEnvironment environment(mode);
    checkGoldenLogits(golden, "cuda", *options);
    checkGoldenChunkedAndCached(golden, chunk, *options, "cuda");
  }
}

compiler::CompileOptions quantize(const std::string &how) {
  compiler::CompileOptions options;
  options.quantize = how;
  return options;
}

TEST(CudaQuantized, Int8PerRow) {
  checkQuantized("tiny-llama.int8", kData + "/models/tiny-llama", quantize("int8"), "Q8 g64", 8, 5,
                 {"tiles", "dequantize"});
}
// Mixture-of-experts: the experts quantized (the routers stay F32), read by the grouped MoE
// kernels (kernels/cuda/tile_product.cuh QuantWeights) for every step.
TEST(CudaQuantized, MoeExpertsInt8PerRow) {
  checkQuantized("tiny-mixtral.int8", kData + "/models/tiny-mixtral", quantize("int8"), "Q8 g96", 2,
                 5);
}
TEST(CudaQuantized, MoeExpertsInt4Groups) {
  checkQuantized("tiny-mixtral.int4", kData + "/models/tiny-mixtral", quantize("int4"), "Q4 g32",
                 10, 5);
}
TEST(CudaQuantized, Fp8PerRow) {
  checkQuantized("tiny-llama.fp8", kData + "/models/tiny-llama", quantize("fp8"), "Q8F g64", 8, 5);
}
// An fp8 checkpoint kept in fp8 with its fp32 scales of 32 x 64 blocks (Q8F32 g64; the lm_head
// and the table stay F32).
TEST(CudaQuantized, Fp8CheckpointBlocks) {
  checkQuantized("tiny-llama-fp8-block", kData + "/models/tiny-llama-fp8-block", {}, "Q8F32 g64", 8,
                 5, {"tiles", "dequantize"});
}
TEST(CudaQuantized, Int4GroupsTiedTable) {
  checkQuantized("tiny-llama-tied.int4", kData + "/models/tiny-llama-tied", quantize("int4"),
                 "Q4 g32", 13, 6);
}
TEST(CudaQuantized, GgufQ8_0) {
  checkQuantized("tiny-llama.gguf", kData + "/gguf/tiny-llama.gguf", {}, "Q8 g32", 10, 5);
}
TEST(CudaQuantized, GptqSymmetric) {
  checkQuantized("tiny-llama-gptq", kData + "/models/tiny-llama-gptq", {}, "Q4 g32", 8, 5);
}
TEST(CudaQuantized, GptqAsymmetricPerOutput) {
  checkQuantized("tiny-llama-gptq-asym", kData + "/models/tiny-llama-gptq-asym", {}, "Q4Z g64", 6,
                 7);
}
TEST(CudaQuantized, Awq) {
  checkQuantized("tiny-llama-awq", kData + "/models/tiny-llama-awq", {}, "Q4Z g64", 8, 6);
}

} // namespace
} // namespace kiln::e2e
