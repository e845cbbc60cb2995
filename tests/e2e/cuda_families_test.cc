// The Mistral, Qwen2/2.5, Qwen3, Phi-3 and Gemma 2 fixtures (tests/e2e/golden_families_test.cc)
// compiled with `--target cpu,<this GPU's SM>` and run by the executor on cuda (label gpu; skips
// without a device, saying why): transformers' logits within 1e-4 at every prompt position and 16
// greedy steps, the prompt in chunks and after a prefix-cache hit. Sliding windows, biases, q/k
// norms, fused checkpoint projections, every rope mode and Gemma 2's soft-capping, GeGLU and scaled
// embeddings through the CUDA kernels and decode graphs. On
// a machine without a GPU, ctest's cudasim.cuda_families_test runs this on the simulator.
#include "tests/e2e/e2e_util.h"

#include "tests/e2e/encoder_util.h"
#include "tests/e2e/sliding_window_util.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kiln::e2e {
namespace {

void checkFamily(const char *name, int32_t chunk, int64_t kvBlockSize) {
  std::string why;
  std::optional<compiler::CompileOptions> options = cudaCompileOptions(why);
  if (!options)
    GTEST_SKIP() << why;
  options->maxSeqLen = 64; // every case fits; tiny-qwen2-dynamic needs more than its default
  options->kvBlockSize = kvBlockSize;
  checkGoldenLogits(name, "cuda", *options);
  checkGoldenChunkedAndCached(name, chunk, *options, "cuda");
}

TEST(CudaFamilies, MistralWindow6) {
  checkFamily("tiny-mistral", 5, 4);
}
TEST(CudaFamilies, MistralWindow20) {
  checkFamily("tiny-mistral-window20", 7, 16);
}
TEST(CudaFamilies, Qwen2TiedYarn) {
  checkFamily("tiny-qwen2", 6, 16);
}
TEST(CudaFamilies, Qwen2UntiedLinearMqa) {
  checkFamily("tiny-qwen2-untied", 6, 16);
}
TEST(CudaFamilies, Qwen2DynamicNtk) {
  checkFamily("tiny-qwen2-dynamic", 6, 4);
}
TEST(CudaFamilies, Qwen3QkNorm) {
  checkFamily("tiny-qwen3", 6, 16);
}
TEST(CudaFamilies, Qwen3TiedMqa) {
  checkFamily("tiny-qwen3-tied", 6, 16);
}
TEST(CudaFamilies, Phi3FusedWindow10) {
  checkFamily("tiny-phi3", 5, 4);
}
TEST(CudaFamilies, Phi3LongRope) {
  checkFamily("tiny-phi3-longrope", 6, 4);
}
// GeGLU, scaled embeddings, soft-capped attention scores and logits, alternating windows.
TEST(CudaFamilies, Gemma2SoftcapsAlternatingWindows) {
  checkFamily("tiny-gemma2", 5, 4);
}
// Mixture-of-experts through moe_experts' CUDA kernels: prompt steps on the grouped GEMMs
// (kernels/cuda/moe_grouped.cuh), decode steps on the row kernel (kernels/cuda/moe.cuh).
TEST(CudaFamilies, MoeMixtralQwen3MoeAndQwen2Moe) {
  checkFamily("tiny-mixtral", 5, 16);
  checkFamily("tiny-qwen3-moe", 6, 16);
  checkFamily("tiny-qwen2-moe", 6, 16); // the shared expert's sigmoid_gated_add kernel
}
// Each path alone for every step (KILN_MOE_PATH, runtime/ops/moe_experts_op.cc).
class ScopedMoePath {
public:
  explicit ScopedMoePath(const char *path) { setenv("KILN_MOE_PATH", path, 1); }
  ~ScopedMoePath() { unsetenv("KILN_MOE_PATH"); }
};
TEST(CudaFamilies, MoeGroupedGemmsEveryStep) {
  ScopedMoePath path("grouped");
  checkFamily("tiny-qwen3-moe", 6, 16);
}
TEST(CudaFamilies, MoeRowKernelEveryStep) {
  ScopedMoePath path("row");
  checkFamily("tiny-mixtral", 5, 16);
}
// q/k norms, local and global RoPE tables; the multimodal checkpoint's text tower.
TEST(CudaFamilies, Gemma3LocalAndGlobalRope) {
  checkFamily("tiny-gemma3", 5, 4);
  checkFamily("tiny-gemma3-mm", 6, 16);
}

// Sliding-window KV cache groups through the engine (tests/e2e/sliding_window_util.h): blocks
// before a window given back, the kernels never reading them.
void checkSlidingWindowOnCuda(const char *name) {
  std::string why;
  std::optional<compiler::CompileOptions> options = cudaCompileOptions(why);
  if (!options)
    GTEST_SKIP() << why;
  checkSlidingWindowEngine(name, "cuda", *options);
}

TEST(CudaFamilies, SlidingWindowEngineGemma2) {
  checkSlidingWindowOnCuda("tiny-gemma2");
}
TEST(CudaFamilies, SlidingWindowEngineGemma3) {
  checkSlidingWindowOnCuda("tiny-gemma3");
}
TEST(CudaFamilies, SlidingWindowEngineMistral) {
  checkSlidingWindowOnCuda("tiny-mistral");
}

// Encoders (tests/e2e/encoder_util.h): layer_norm, gelu and bidirectional attention through the
// CUDA kernels, hidden states within 1e-4 of transformers'.
void checkEncoderOnCuda(const char *name, size_t cases) {
  std::string why;
  std::optional<compiler::CompileOptions> options = cudaCompileOptions(why);
  if (!options)
    GTEST_SKIP() << why;
  checkEncoder(name, cases, "cuda", *options);
}
TEST(CudaFamilies, EncoderBert) {
  checkEncoderOnCuda("tiny-bert", 6);
}
TEST(CudaFamilies, EncoderXlmRoberta) {
  checkEncoderOnCuda("tiny-xlm-roberta", 6);
}
TEST(CudaFamilies, EncoderDecoderBart) {
  checkEncoderOnCuda("tiny-bart", 6);
}
TEST(CudaFamilies, EmbeddingQwen3) {
  checkEncoderOnCuda("tiny-qwen3-embedding", 5);
}
TEST(CudaFamilies, EmbeddingQwen2) {
  checkEncoderOnCuda("tiny-qwen2-embedding", 5);
}
TEST(CudaFamilies, EmbeddingMistral) {
  checkEncoderOnCuda("tiny-mistral-embedding", 5);
}

} // namespace
} // namespace kiln::e2e
