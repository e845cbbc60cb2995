// Paged attention on the GPU vs the CPU reference: split-K decode (+ reduce) and flash-style
// prefill over ragged batches (SIMT for fp32, tensor cores for fp16/bf16), GQA shapes of the test
// models and Llama-3.1-8B, fp32/bf16/fp16, causal and over sliding windows (Mistral, Phi-3).
// Label gpu: skips without a device.
#include "compiler/codegen/kernel_catalog.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/params.h"
#include "tests/kernels/cuda/gpu_harness.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;
namespace cpu = kiln::kernels::cpu;
using compiler::makeKernelInstance;

struct HeadShape {
  int32_t heads, kvHeads, headDim;
};
const HeadShape kShapes[] = {{4, 2, 16}, {8, 4, 16}, {4, 1, 32}, {8, 8, 64}, {32, 8, 128}};
constexpr int32_t kBlockSize = 16;

// kvDtype "": the cache in dtype; "f8" etc.: `--kv-dtype`'s cache of its own; "-": no cache.
std::map<std::string, std::string> constants(const std::string &dtype, const HeadShape &s,
                                             const std::string &kvDtype) {
  std::map<std::string, std::string> c = {{"dtype", dtype},
                                          {"num_heads", std::to_string(s.heads)},
                                          {"head_dim", std::to_string(s.headDim)}};
  if (kvDtype != "-") {
    c["num_kv_heads"] = std::to_string(s.kvHeads);
    c["block_size"] = std::to_string(kBlockSize);
    c["kv_dtype"] = kvDtype.empty() ? dtype : kvDtype;
  }
  return c;
}

struct Kernels {
  KernelInstance prefill, decode, reduce;
};
Kernels kernelsFor(const std::string &dtype, const HeadShape &s, const std::string &kvDtype = "") {
  return {makeKernelInstance("attention_prefill", constants(dtype, s, kvDtype)),
          makeKernelInstance("attention_decode", constants(dtype, s, kvDtype)),
          makeKernelInstance("attention_decode_reduce", constants(dtype, s, "-"))};
}

// One step: sequences with `cached` tokens already in the cache and `fresh` new query tokens
// (whose K/V are in the cache too, as RopeKvWrite put them there before attention).
struct Sequence {
  int32_t cached, fresh;
};

struct Step {
  std::vector<int32_t> positions, queryStartLoc, contextLens, blockTables;
  int32_t maxBlocksPerSeq = 0, numBlocks = 0, maxContext = 0;
};

Step makeStep(const std::vector<Sequence> &seqs, uint32_t seed) {
  Step step;
  step.queryStartLoc.push_back(0);
  for (const Sequence &s : seqs) {
    for (int32_t i = 0; i < s.fresh; ++i)
      step.positions.push_back(s.cached + i);
    step.queryStartLoc.push_back(step.queryStartLoc.back() + s.fresh);
    step.contextLens.push_back(s.cached + s.fresh);
    step.maxContext = std::max(step.maxContext, s.cached + s.fresh);
    step.maxBlocksPerSeq =
        std::max(step.maxBlocksPerSeq, (s.cached + s.fresh + kBlockSize - 1) / kBlockSize);
  }
  step.numBlocks = step.maxBlocksPerSeq * static_cast<int32_t>(seqs.size());
  std::vector<int32_t> pool(step.numBlocks); // blocks handed out in a shuffled order
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  step.blockTables = pool; // row s: blocks s*maxBlocksPerSeq ..., all distinct
  return step;
}

// NaN into the cache rows of the positions no query of a sequence sees through a sliding window
// (before its first query's window), so a kernel that reads them at all fails.
void poisonBeforeWindows(const Step &step, const HeadShape &s, int32_t window,
                         std::vector<float> &kCache, std::vector<float> &vCache) {
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t seq = 0; seq + 1 < step.queryStartLoc.size(); ++seq) {
    const int32_t first = kc::attentionWindowStart(step.positions[step.queryStartLoc[seq]], window);
    for (int32_t pos = 0; pos < first; ++pos) {
      const int64_t block = step.blockTables[seq * step.maxBlocksPerSeq + pos / kBlockSize];
      for (int32_t h = 0; h < s.kvHeads; ++h) {
        const int64_t row = ((block * s.kvHeads + h) * kBlockSize + pos % kBlockSize) * s.headDim;
        std::fill_n(kCache.begin() + row, s.headDim, nan);
        std::fill_n(vCache.begin() + row, s.headDim, nan);
      }
    }
  }
}

// window > 0: sliding-window attention, and the keys before every window are NaN.
// kvDt: the cache's dtype when it has one of its own (`--kv-dtype`); the reference reads the
// same values widened to fp32 (times kvScales, an fp8 cache's layer scales).
void checkAttention(GpuHarness &gpu, const std::string &dt, const HeadShape &s,
                    const std::vector<Sequence> &seqs, bool decodePath, uint32_t seed,
                    float sharpen = 1.0f, int32_t window = 0, const std::string &kvDt = "",
                    float softcap = 0.0f, int32_t kvStaging = 1,
                    std::vector<uint8_t> *gpuOut = nullptr,
                    std::pair<float, float> kvScales = {1.0f, 1.0f}) {
  const std::string cacheDt = kvDt.empty() ? dt : kvDt;
  const Kernels k = kernelsFor(dt, s, kvDt);
  const Step step = makeStep(seqs, seed);
  const auto numSeqs = static_cast<int32_t>(seqs.size());
  const auto numTokens = static_cast<int32_t>(step.positions.size());
  const size_t bytes = dt == "f32" ? 4 : 2;
  const size_t rowElems = static_cast<size_t>(s.heads) * s.headDim;
  const size_t cacheElems =
      static_cast<size_t>(step.numBlocks) * s.kvHeads * kBlockSize * s.headDim;
  std::vector<float> q = randomValues(numTokens * rowElems, seed + 1, dt);
  std::vector<float> kCache =
      decode(encode(randomValues(cacheElems, seed + 2, dt), cacheDt), cacheDt);
  std::vector<float> vCache =
      decode(encode(randomValues(cacheElems, seed + 3, dt), cacheDt), cacheDt);
  if (window > 0)
    poisonBeforeWindows(step, s, window, kCache, vCache);
  const float scale = sharpen / std::sqrt(static_cast<float>(s.headDim));

  std::vector<float> ref(numTokens * rowElems);
  std::vector<float> kRef = kCache, vRef = vCache; // the cache as attention reads it
  for (size_t i = 0; i < kRef.size(); ++i) {
    kRef[i] *= kvScales.first;
    vRef[i] *= kvScales.second;
  }
  cpu::AttentionArgs args{q.data(),
                          step.positions.data(),
                          step.queryStartLoc.data(),
                          step.contextLens.data(),
                          step.blockTables.data(),
                          step.maxBlocksPerSeq,
                          kRef.data(),
                          vRef.data(),
                          ref.data(),
                          numSeqs,
                          numTokens,
                          s.heads,
                          s.kvHeads,
                          s.headDim,
                          kBlockSize,
                          scale};
  args.slidingWindow = window;
  args.logitSoftcap = softcap;
  cpu::attention(args);

  const size_t states = static_cast<size_t>(numSeqs) * s.heads * kc::kMaxDecodeSplits;
  auto *scratch = static_cast<float *>(gpu.alloc(states * (s.headDim + 2) * sizeof(float)));
  void *dout = gpu.alloc(ref.size() * bytes);
  kc::AttentionParams p{gpu.upload(encode(q, dt)),
                        static_cast<const int32_t *>(gpu.uploadPod(step.positions)),
                        static_cast<const int32_t *>(gpu.uploadPod(step.queryStartLoc)),
                        static_cast<const int32_t *>(gpu.uploadPod(step.blockTables)),
                        gpu.upload(encode(kCache, cacheDt)),
                        gpu.upload(encode(vCache, cacheDt)),
                        dout,
                        scratch,
                        scratch + states * s.headDim,
                        scratch + states * (s.headDim + 1),
                        step.maxBlocksPerSeq,
                        numSeqs,
                        numTokens,
                        1,
                        scale,
                        window,
                        softcap};
  p.kvStaging = kvStaging;
  p.kScale = kvScales.first;
  p.vScale = kvScales.second;
  const auto threads = static_cast<uint32_t>(kc::kAttentionThreads);
  if (decodePath) {
    p.numSplits =
        std::clamp((step.maxContext + kc::kMinDecodeSplitLen - 1) / kc::kMinDecodeSplitLen, 1,
                   kc::kMaxDecodeSplits);
    ASSERT_TRUE(gpu.launch(k.decode.symbol, numSeqs, s.kvHeads, p.numSplits, threads, p).isOk());
    ASSERT_TRUE(gpu.launch(k.reduce.symbol, numSeqs, s.heads, 1, threads, p).isOk());
  } else {
    const int32_t rows = kc::prefillBlockRows(s.headDim, static_cast<int32_t>(bytes));
    const auto tiles = static_cast<uint32_t>((numTokens + rows - 1) / rows + numSeqs);
    ASSERT_TRUE(gpu.launch(k.prefill.symbol, tiles, s.heads, 1, threads, p).isOk());
  }
  std::vector<uint8_t> out = gpu.download(dout, ref.size() * bytes);
  expectClose(decode(out, dt), ref, dt, decodePath ? "decode attention" : "prefill attention");
  if (gpuOut)
    *gpuOut = std::move(out);
}

// A cache of its own dtype under the activations' (`--kv-dtype`): fp8 under fp32 (the SIMT
// prefill), under bf16 and f16 (the tensor-core prefill converts it in shared memory), bf16 under
// fp32, fp32 under bf16 (a cache wider than the activations).
const std::pair<const char *, const char *> kKvDtypes[] = {
    {"f32", "f8"}, {"bf16", "f8"}, {"f16", "f8"}, {"f32", "bf16"}, {"bf16", "f32"}};
// Their shapes: the smallest head, a group of one, Llama-3.1-8B's (kept few: cudasim compiles
// every instance).
const HeadShape kKvShapes[] = {{4, 2, 16}, {8, 8, 64}, {32, 8, 128}};

std::vector<KernelInstance> allInstances() {
  std::vector<KernelInstance> all;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : kShapes) {
      Kernels k = kernelsFor(dt, s);
      all.insert(all.end(), {k.prefill, k.decode, k.reduce});
    }
  for (const auto &[dt, kv] : kKvDtypes)
    for (const HeadShape &s : kKvShapes) {
      Kernels k = kernelsFor(dt, s, kv);
      all.insert(all.end(), {k.prefill, k.decode});
    }
  return all;
}

TEST(CudaAttention, DecodeAndPrefillMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load(allInstances()).isOk());
  // Decode: one token each; 1100 and 3000 tokens take several splits, 1 and 17 take one.
  const std::vector<Sequence> decodeStep = {{0, 1}, {16, 1}, {299, 1}, {1099, 1}, {2999, 1}};
  // Prefill / mixed: fresh prompts, a chunk after a cached prefix, a decode token, a long chunk.
  const std::vector<Sequence> prefillStep = {{0, 5}, {20, 1}, {3, 40}, {100, 33}, {0, 70}};
  uint32_t seed = 10;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : kShapes) {
      SCOPED_TRACE(std::string(dt) + " heads " + std::to_string(s.heads) + "/" +
                   std::to_string(s.kvHeads) + " dim " + std::to_string(s.headDim));
      checkAttention(*gpu, dt, s, decodeStep, /*decodePath=*/true, seed++);
      checkAttention(*gpu, dt, s, decodeStep, /*decodePath=*/false, seed++); // 1-row tiles
      checkAttention(*gpu, dt, s, prefillStep, /*decodePath=*/false, seed++);
      // Sharp scores: row maxima keep growing by more than the tensor-core kernel's lazy
      // rescaling threshold (e^8) from one KV tile to the next, so O is rescaled mid-walk.
      checkAttention(*gpu, dt, s, prefillStep, /*decodePath=*/false, seed++, /*sharpen=*/24.0f);
    }
  for (const auto &[dt, kv] : kKvDtypes)
    for (const HeadShape &s : kKvShapes) {
      SCOPED_TRACE(std::string(dt) + " over a " + kv + " cache, heads " + std::to_string(s.heads) +
                   "/" + std::to_string(s.kvHeads) + " dim " + std::to_string(s.headDim));
      checkAttention(*gpu, dt, s, decodeStep, /*decodePath=*/true, seed++, 1.0f, 0, kv);
      checkAttention(*gpu, dt, s, prefillStep, /*decodePath=*/false, seed++, 1.0f, 0, kv);
      if (std::string(kv) != "f8")
        continue;
      // A layer's calibrated scales (plan.fbs KvCacheSpec.k_scales): powers of two, so the
      // tensor-core prefill's widened values stay exact in bf16 / f16 as the reference's.
      const std::pair<float, float> scales = {0.5f, 4.0f};
      checkAttention(*gpu, dt, s, decodeStep, true, seed++, 1.0f, 0, kv, 0.0f, 1, nullptr, scales);
      checkAttention(*gpu, dt, s, decodeStep, true, seed++, 1.0f, 0, kv, 0.0f, 0, nullptr, scales);
      checkAttention(*gpu, dt, s, prefillStep, false, seed++, 1.0f, 0, kv, 0.0f, 1, nullptr,
                     scales);
    }
}

// Decode with K and V staged in shared memory (the default where they fit) and loaded into
// registers (KILN_DECODE_KV_STAGING=0) sums the same products in the same order: equal bytes, over
// one- and two-tile splits, a window and every cache dtype (shapes that cannot stage load both
// ways).
TEST(CudaAttention, DecodeStagedEqualsDecodeLoadedBitForBit) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load(allInstances()).isOk());
  // 1100 keys: 16 splits of two tiles each.
  const std::vector<Sequence> decodeStep = {{0, 1}, {63, 1}, {64, 1}, {299, 1}, {1099, 1}};
  uint32_t seed = 300;
  auto compare = [&](const std::string &dt, const HeadShape &s, int32_t window,
                     const std::string &kv) {
    SCOPED_TRACE(dt + " over a " + (kv.empty() ? dt : kv) + " cache, heads " +
                 std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) + " dim " +
                 std::to_string(s.headDim) + " window " + std::to_string(window));
    std::vector<uint8_t> staged, loaded;
    checkAttention(*gpu, dt, s, decodeStep, true, seed, 1.0f, window, kv, 0.0f, 1, &staged);
    checkAttention(*gpu, dt, s, decodeStep, true, seed, 1.0f, window, kv, 0.0f, 0, &loaded);
    ++seed;
    EXPECT_EQ(staged, loaded);
    gpu->freeAll();
  };
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : kShapes)
      compare(dt, s, 0, "");
  for (const HeadShape &s : kShapes)
    compare("bf16", s, 100, "");
  for (const auto &[dt, kv] : kKvDtypes)
    for (const HeadShape &s : kKvShapes)
      compare(dt, s, 0, kv);
}

// Sliding windows of 1, below, at and above the block size (16) and the tiles (64 decode, 32
// prefill), and longer than every context. Decode contexts of 300-1100 tokens with windows of 100
// and 200 take 2 and 4 splits of a launch sized for 1100 tokens (16 splits); the prefill step
// holds a chunk after cached positions whose window starts tiles after position 0.
TEST(CudaAttention, SlidingWindowMatchesTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  const HeadShape shapes[] = {{4, 2, 16}, {4, 1, 32}};
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : shapes) {
      Kernels k = kernelsFor(dt, s);
      instances.insert(instances.end(), {k.prefill, k.decode, k.reduce});
    }
  ASSERT_TRUE(gpu->load(instances).isOk());
  const std::vector<Sequence> decodeStep = {{0, 1}, {16, 1}, {299, 1}, {349, 1}, {1099, 1}};
  const std::vector<Sequence> prefillStep = {{0, 5},    {20, 1}, {3, 40},
                                             {100, 33}, {0, 70}, {200, 40}};
  uint32_t seed = 500;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : shapes)
      for (int32_t window : {1, 5, 16, 17, 40, 100, 200, 5000}) {
        SCOPED_TRACE(std::string(dt) + " heads " + std::to_string(s.heads) + "/" +
                     std::to_string(s.kvHeads) + " dim " + std::to_string(s.headDim) + " window " +
                     std::to_string(window));
        checkAttention(*gpu, dt, s, decodeStep, /*decodePath=*/true, seed++, 1.0f, window);
        checkAttention(*gpu, dt, s, prefillStep, /*decodePath=*/false, seed++, 1.0f, window);
      }
}

// Gemma 2's soft-capped scores (tanh(s / c) * c) on every path: decode, SIMT prefill (fp32) and
// tensor-core prefill (bf16 / f16), windowed and not, with scores sharpened so the cap bites.
TEST(CudaAttention, SoftcappedScoresMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  const HeadShape shapes[] = {{4, 2, 32}};
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : shapes) {
      Kernels k = kernelsFor(dt, s);
      instances.insert(instances.end(), {k.prefill, k.decode, k.reduce});
    }
  ASSERT_TRUE(gpu->load(instances).isOk());
  const std::vector<Sequence> decodeStep = {{0, 1}, {16, 1}, {299, 1}, {1099, 1}};
  const std::vector<Sequence> prefillStep = {{0, 5}, {20, 1}, {3, 40}, {100, 33}};
  uint32_t seed = 900;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const HeadShape &s : shapes)
      for (int32_t window : {0, 6})
        for (float softcap : {1.0f, 5.0f}) {
          SCOPED_TRACE(std::string(dt) + " window " + std::to_string(window) + " softcap " +
                       std::to_string(softcap));
          checkAttention(*gpu, dt, s, decodeStep, /*decodePath=*/true, seed++, 4.0f, window, "",
                         softcap);
          checkAttention(*gpu, dt, s, prefillStep, /*decodePath=*/false, seed++, 4.0f, window, "",
                         softcap);
        }
}

} // namespace
} // namespace kiln::testing
