// Launch parameter structs of the CUDA kernels, shared byte for byte by the kernels (compiled by
// NVRTC) and the host backend that fills them (runtime/hal/cuda). Every kernel takes exactly one
// of these by value, so a launch passes one pointer in cuLaunchKernel's kernelParams. Pointers
// are untyped because the element type is a template parameter of the kernel, not of the struct.
//
// Argument meaning is the CPU reference's (kernels/cpu/kernels.h): same tensors, same layouts,
// same paged-cache convention ([numBlocks][kvHeads][blockSize][headDim] per layer, negative slot =
// padding token). Sizes fixed by the model are template parameters of the kernels instead.
#pragma once

#if defined(__CUDACC_RTC__)
#include <cuda/std/cstdint>
#define KILN_HOST_DEVICE __host__ __device__
namespace kiln::kernels::cuda {
using int32_t = ::cuda::std::int32_t;
using int64_t = ::cuda::std::int64_t;
} // namespace kiln::kernels::cuda
#elif defined(__CUDACC__)
#include <cstdint>
#define KILN_HOST_DEVICE __host__ __device__
#else
#include <cstdint>
#define KILN_HOST_DEVICE
#endif

namespace kiln::kernels::cuda {

// Every attention kernel runs 4 warps: the host needs the number to launch them.
constexpr int32_t kAttentionThreads = 128;
// Split-K decode: the keys a sequence's token sees (its whole context, or the last slidingWindow
// positions) are cut into at most kMaxDecodeSplits parts of at least kMinDecodeSplitLen tokens
// each (rounded to whole tiles); the split count depends only on that sequence's visible length,
// so results do not depend on the rest of the batch.
// 64 (one tile): on the H100 a batch-1 decode at context 128 ran 8 CTAs (one per kv head) and
// attention took 14% of the step; splits of one tile give a short context 2-4x the CTAs.
constexpr int32_t kMaxDecodeSplits = 16;
constexpr int32_t kMinDecodeSplitLen = 64;
// Keys per tile of the decode kernel; a split's length is a whole number of tiles.
constexpr int32_t kDecodeTile = 64;

// The splits `contextLen` visible keys want: ceil(contextLen / kMinDecodeSplitLen) in
// [1, kMaxDecodeSplits]. The host launches numSplits = decodeSplitsFor(maxContextLen), which is
// at least what any sequence's visible keys want (a window only shortens them; the function is
// non-decreasing).
KILN_HOST_DEVICE constexpr int32_t decodeSplitsFor(int32_t contextLen) {
  const int32_t splits = (contextLen + kMinDecodeSplitLen - 1) / kMinDecodeSplitLen;
  return splits < 1 ? 1 : splits > kMaxDecodeSplits ? kMaxDecodeSplits : splits;
}

// The first cache position a query at `position` attends to: with a sliding window W > 0 the
// last W positions (transformers' mask: position - key < W), else 0 (full causal attention).
KILN_HOST_DEVICE constexpr int32_t attentionWindowStart(int32_t position, int32_t window) {
  return window > 0 && position >= window ? position - window + 1 : 0;
}

// How one sequence is split when the launch has `numSplits` CTAs per (sequence, kv head). The
// split cuts the `visibleLen` keys its token sees, positions [windowStart, windowStart +
// visibleLen) (attentionWindowStart; the whole context without a window): split i holds
// windowStart + [i * length, (i + 1) * length). `count` splits of `length` tokens (the last may be
// shorter); CTAs with blockIdx.z >= count exit at once and write nothing, and the reduce kernel
// reads only `count` partial states. Invariants (checked on the host by
// tests/runtime/hal_cuda/cuda_launch_test.cc):
//   - every split i < count holds keys (i * length < visibleLen), so no partial state is empty;
//   - with numSplits >= decodeSplitsFor(visibleLen), the split does not depend on numSplits. A
//     step padded for a CUDA graph launches decodeSplitsFor(max_seq_len) splits whatever its
//     lengths, and every sequence is split exactly as in an uncaptured step.
struct DecodeSplit {
  int32_t count;
  int32_t length;
};
KILN_HOST_DEVICE constexpr DecodeSplit decodeSplit(int32_t visibleLen, int32_t numSplits) {
  int32_t count = decodeSplitsFor(visibleLen);
  count = count < numSplits ? count : numSplits;
  count = count > 1 ? count : 1;
  const int32_t perSplit = (visibleLen + count - 1) / count;
  const int32_t length = (perSplit + kDecodeTile - 1) / kDecodeTile * kDecodeTile;
  return {(visibleLen + length - 1) / length, length};
}
// Prefill attention runs on tensor cores (attention_prefill_tc.cuh) for fp16/bf16 and head dims
// that are whole 16-wide tiles up to 128 (its O accumulators stay in registers); else on the
// SIMT kernel (attention_prefill.cuh).
KILN_HOST_DEVICE constexpr bool prefillUsesTensorCores(int32_t headDim, int32_t elementBytes) {
  return elementBytes == 2 && headDim % 16 == 0 && headDim >= 16 && headDim <= 128;
}
// Query rows per prefill CTA: 64 on tensor cores (16 per warp); on the SIMT kernel 32 unless the
// tiles of 32 rows do not fit in static shared memory.
KILN_HOST_DEVICE constexpr int32_t prefillBlockRows(int32_t headDim, int32_t elementBytes) {
  if (prefillUsesTensorCores(headDim, elementBytes))
    return 64;
  return headDim * elementBytes > 512 ? 16 : 32;
}

// y[t] = table[tokenIds[t] - vocabStart] for ids in [vocabStart, vocabStart + vocabRows), else
// zeros (a vocab-parallel rank's shard)       grid (numTokens, ceil(hidden / chunk))
struct EmbeddingParams {
  const int32_t *tokenIds;
  const void *table; // [vocabRows, hidden], weight dtype; a quantized table's values section
  void *out;         // [numTokens, hidden]
  int32_t numTokens;
  int32_t vocabStart; // the id of table row 0 (0 unless tensor-parallel)
  int32_t vocabRows;  // rows of `table`
  const void *scales; // a quantized table (embedding_quant): its scales section; else null
  const void *mins;   // its mins / zero points (Q4M, Q4Z); else null
  float scale = 1.0f; // each row times this in fp32 before rounding to T (Gemma's sqrt(hidden))
};

// out = RmsNorm(x) * weight                      grid (rows)
struct RmsNormParams {
  const void *x;
  const void *weight; // [hidden]
  void *out;
  int32_t rows;
  float eps;
};

// out = (x - mean) / sqrt(var + eps) * weight + bias   grid (rows)
struct LayerNormParams {
  const void *x;
  const void *weight; // [hidden], fp32
  const void *bias;   // [hidden], fp32
  void *out;
  int32_t rows;
  float eps;
};

// out = 0.5 x (1 + erf(x / sqrt(2))) over rows of `width` elements   grid (rows, chunks)
struct GeluParams {
  const void *x;
  void *out;
  int32_t rows;
};

// out = a + sigmoid(x . weight) * b per row of hidden elements   grid (rows)
struct SigmoidGatedAddParams {
  const void *a;
  const void *b;
  const void *x;
  const void *weight; // [hidden], fp32
  void *out;
  int32_t rows;
};

// residual += x; out = RmsNorm(residual) * weight  grid (rows)
struct AddRmsNormParams {
  const void *x;
  void *residual;
  const void *weight;
  void *out;
  int32_t rows;
  float eps;
};

// ids[r] = argmax of logits row r (sampling.cuh: lowest id among the largest finite values, -1
// when none is finite).                                               grid (rows), kArgmaxThreads
constexpr int32_t kArgmaxThreads = 1024;
// The instance every CUDA module holds (compiler/driver/gpu_kernels.cc): op argmax_rows with
// threads = kArgmaxThreads. The runtime finds it by this name; older artifacts lack it.
constexpr const char *kArgmaxRowsSymbol = "kiln_argmax_rows_1024";
struct ArgmaxRowsParams {
  const float *logits; // [rows, vocab]
  int32_t *ids;        // [rows]
  int32_t rows;
  int32_t vocab;
};

// CTAs per token of RopeKvWrite (grid.y): a decode step of one sequence would otherwise run the
// whole (H + 2 KV) x head_dim row on one CTA (9 us per layer on the H100).
constexpr int32_t kRopeCtasPerToken = 4;
// RopeKvWriteParams::mode: the values of kernels/cpu/kernels.h RopeMode, which says what each
// does.
constexpr int32_t kRopeStatic = 0;
constexpr int32_t kRopeLongShort = 1; // invFreq = [short | long]
constexpr int32_t kRopeDynamicNtk = 2;
// Rotates q and k, writes rotated k and raw v to the cache at slotMapping[t].
// grid (numTokens, kRopeCtasPerToken); any grid.y works, the CTAs of a token share its work.
struct RopeKvWriteParams {
  const void *qkv;            // [numTokens, (H + 2 KV) * D]
  const int32_t *positions;   // [numTokens]
  const int32_t *slotMapping; // [numTokens]
  const float *invFreq;       // [rotaryDim / 2] ([2][rotaryDim / 2] for kRopeLongShort), fp32
  void *q;                    // [numTokens, H * D]
  void *kCache;               // this layer
  void *vCache;
  int32_t numTokens;
  // Run-time scaling, the CPU reference's RopeKvWriteArgs members of the same names; the
  // defaults are plain RoPE.
  int32_t mode = kRopeStatic;
  const int32_t *queryStartLoc = nullptr; // [numSeqs + 1]; read unless kRopeStatic
  int32_t numSeqs = 0;
  int32_t originalMaxPositions = 0;
  float ropeTheta = 0.0f;
  double dynamicFactor = 1.0;
  float attentionScaling = 1.0f;
  const int32_t *sequenceLengths = nullptr; // [numSeqs]; null: last position + 1
  const float *qNorm = nullptr;             // [HEAD_DIM] fp32 each; null: no q/k norm
  const float *kNorm = nullptr;
  float qkNormEps = 0.0f;
  // The layer's fp8 cache scales (plan.fbs KvCacheSpec.k_scales / v_scales; common.cuh
  // kvFromFloat): k and v are stored divided by them. 1 for other caches.
  float kScale = 1.0f;
  float vScale = 1.0f;
};

// Paged causal attention (plan.fbs Attention), optionally over a sliding window. Decode: grid
// (numSeqs, KV, splits) + reduce grid (numSeqs, H); prefill: grid (ceil(numTokens /
// prefillBlockRows) + numSeqs, H).
struct AttentionParams {
  const void *q;                // [numTokens, H * D]
  const int32_t *positions;     // [numTokens]
  const int32_t *queryStartLoc; // [numSeqs + 1]
  const int32_t *blockTables;   // [numSeqs, maxBlocksPerSeq]
  const void *kCache;
  const void *vCache;
  void *out; // [numTokens, H * D]
  // Split-K scratch, fp32: partialOut [maxBatch][H][kMaxDecodeSplits][D], partialMax and
  // partialSum [maxBatch][H][kMaxDecodeSplits]. Unused by prefill.
  float *partialOut;
  float *partialMax;
  float *partialSum;
  int32_t maxBlocksPerSeq;
  int32_t numSeqs;
  int32_t numTokens;
  int32_t numSplits; // gridDim.z of the decode launch; the reduce kernel reads it too
  float scale;
  // W > 0: a token at position p sees cache positions attentionWindowStart(p, W)..p, the last W
  // (Mistral, Phi-3); 0: all of 0..p. Last, so host initialisers that end at scale still compile.
  int32_t slidingWindow = 0;
  // c > 0: each scaled score s becomes tanh(s / c) * c before the softmax (Gemma 2); 0: none.
  float logitSoftcap = 0.0f;
  // Decode only: 1 streams K and V through shared memory with asynchronous copies where they fit
  // (PagedDecode::kCanStage, kernels/cuda/attention_decode.cuh), 0 loads them into registers.
  // The host chooses per step (runtime/ops/attention_op.cc: kvStagingFor).
  int32_t kvStaging = 1;
  // The layer's fp8 cache scales (plan.fbs KvCacheSpec.k_scales / v_scales; common.cuh
  // kvToFloat): cached k and v are read times them. 1 for other caches.
  float kScale = 1.0f;
  float vScale = 1.0f;
};

// out[r, i] = silu(gu[r, i]) * gu[r, I + i]      grid (rows, ceil(I / chunk))
// (GeluTanhMul's too: out = gelu_tanh(gateUp[:, :I]) * gateUp[:, I:], GeGLU)
struct SiluMulParams {
  const void *gateUp;
  void *out;
  int32_t rows;
};

// Quantized weights (runtime/base/quant_layout.h): the kernels' `format` constant is the
// layout's QuantFormat + 1 (template constants are positive integers), `group` its group size.
// Values are read in runs of 32 columns (a group is a whole number of them): 32 bytes (Q8, Q8F,
// Q8F32) or 16 bytes (4-bit, value b in the low nibble of byte b, value b + 16 in its high nibble).
constexpr int32_t kQuantFormatQ8 = 1;
constexpr int32_t kQuantFormatQ4 = 2;
constexpr int32_t kQuantFormatQ4Min = 3;
constexpr int32_t kQuantFormatQ4Zero = 4;
constexpr int32_t kQuantFormatQ8Float = 5;
constexpr int32_t kQuantFormatQ8FloatF32 = 6; // fp32 scales
constexpr int32_t kQuantRun = 32;

// A quantized [rows, in] matrix's sections, located by the host (quantLayout).
struct QuantSections {
  const void *values;
  const void *scales; // fp16 (Q8F32: fp32), [rows, in / group]
  const void *mins;   // Q4M fp16 mins, Q4Z uint16 zero points, shaped as scales; else null
};

// MoeExperts, one CTA per row (kernels/cuda/moe.cuh)  grid (rows)
struct MoeExpertsParams {
  const void *x;            // [rows, H]
  const void *routerLogits; // [rows, E]
  const void *gateUp;       // [E * 2I, H]
  const void *down;         // [E * H, I]
  void *out;                // [rows, H]
  int32_t rows;
  int32_t renormalize;
};

// The tile products of kernels/cuda/tile_product.cuh (the grouped MoE GEMMs, the quantized
// Linear's GEMM): a CTA of kTileThreads threads multiplies kTileRows rows by kTileCols W rows.
constexpr int32_t kTileThreads = 256;
constexpr int32_t kTileRows = 64;
constexpr int32_t kTileCols = 64;

// MoeExperts as grouped GEMMs over the rows routed to each expert (kernels/cuda/moe_grouped.cuh):
// route (grid ceil(rows / kMoeRouteThreads)), place (grid 1, kMoePlaceThreads), gate_up (grid
// (moeMaxTiles, ceil(I / kTileCols))), down (grid (moeMaxTiles, ceil(H / kTileCols))), both
// kTileThreads, combine (grid (rows, ceil(H / kMoeCombineThreads))). The pair of row r and its
// k-th expert (in increasing expert index) is r * TOPK + k; a slot is a row of act / expertOut,
// each expert's slots contiguous.
constexpr int32_t kMoeRouteThreads = 128;
constexpr int32_t kMoePlaceThreads = 1024;
constexpr int32_t kMoeCombineThreads = 256;
constexpr int32_t kMoeMaxExperts = 512; // the place kernel's shared counters
// Row tiles a step of `pairs` routed pairs can need: each expert's last tile may be partial.
KILN_HOST_DEVICE constexpr int32_t moeMaxTiles(int32_t pairs, int32_t experts) {
  return (pairs + kTileRows - 1) / kTileRows + (experts < pairs ? experts : pairs);
}
struct MoeGroupedParams {
  const void *x;            // [rows, H]
  const void *routerLogits; // [rows, E]
  const void *gateUp;       // [E * 2I, H]
  const void *down;         // [E * H, I]
  void *out;                // [rows, H]
  int32_t *pairExpert;      // [rows * TOPK]
  float *pairWeight;        // [rows * TOPK]
  int32_t *pairSlot;        // [rows * TOPK]
  int32_t *slotRow;         // [rows * TOPK]: the x row a slot holds
  int32_t *expertStart;     // [E + 1]: each expert's first slot, then the number of slots
  int32_t *tileStart;       // [E + 1]: each expert's first row tile, then the number of tiles
  void *act;                // [rows * TOPK, I]: silu(gate) * up, in T
  void *expertOut;          // [rows * TOPK, H]: down's output, in T
  int32_t rows;
  int32_t renormalize;
  QuantSections gateUpQuant; // quantized experts (weight_dtype q<format>g<group>): gate_up's
  QuantSections downQuant;   // and down's sections; gateUp / down then unread
};

// out = tanh(x / cap) * cap over rows of `width`  grid (rows, ceil(width / chunk)); out may be x
struct SoftcapParams {
  const void *x;
  void *out;
  int32_t rows;
  float cap;
};

// out = a + b over rows of `width` elements      grid (rows, ceil(width / chunk))
struct AddParams {
  const void *a;
  const void *b;
  void *out;
  int32_t rows;
};

// out[i] = x[indices[i]]                          grid (numRows, ceil(width / chunk))
struct GatherRowsParams {
  const void *x;
  const int32_t *indices;
  void *out;
  int32_t numRows;
};

// A decode-sized Linear (plan.fbs) as one pass over W: y[r, o] = sum_k x[r, k] w[o, k] (+ bias[o])
// for every r < rows <= kGemvMaxRows, fp32 accumulation, bias added in fp32, y rounded once.
// grid (ceil(out / gemvOutputsPerCta(outsPerWarp))), block kGemvThreads; no dynamic shared memory.
// Each warp streams outsPerWarp W rows (1 or 2) with kGemvLoadsPerLane 16-byte loads in flight per
// lane: one row suits Linears of few outputs (more warps in flight), two suit wide ones
// (tools/bench/gemv_sweep.cu measured both; docs/benchmarks.md "GEMV sweep"). The runtime times
// both against cuBLASLt at load and keeps the fastest per row bucket
// (runtime/hal/cuda/cuda_device.cc).
constexpr int32_t kGemvMaxRows = 8;
constexpr int32_t kGemvThreads = 128;
constexpr int32_t kGemvMaxOutputsPerWarp = 2;
constexpr int32_t kGemvLoadsPerLane = 8;
constexpr int32_t gemvOutputsPerCta(int32_t outsPerWarp) {
  return kGemvThreads / 32 * outsPerWarp;
}
struct GemvParams {
  const void *x;     // [rows, in], the kernel's dtype
  const void *w;     // [out, in], the kernel's dtype
  const float *bias; // [out] fp32, or null
  void *y;           // [rows, out], the kernel's y_dtype
  int32_t rows;      // 1..kGemvMaxRows
  int32_t out;
  int32_t outsPerWarp; // 1..kGemvMaxOutputsPerWarp
};

// The GEMV (see GemvParams) on a quantized W: y[r, o] = sum_k x[r, k] w[o, k] (+ bias[o]), each
// w the exact fp32 value its layout defines, fp32 accumulation, y rounded once.
// grid (ceil(out / gemvOutputsPerCta(1))), block kGemvThreads: one W row per warp.
struct GemvQuantParams {
  const void *x; // [rows, in], the kernel's dtype
  QuantSections w;
  const float *bias; // [out] fp32, or null
  void *y;           // [rows, out], the kernel's y_dtype
  int32_t rows;      // 1..kGemvMaxRows
  int32_t out;
};

// A quantized Linear of more rows than the GEMV takes, as tiles (kernels/cuda/quant.cuh
// gemmQuant): y[r, o] = sum_k x[r, k] w'[o, k] (+ bias[o]), w' each weight's exact fp32 value
// rounded once to the kernel's dtype (as dequant_weights writes it), fp32 accumulation, y rounded
// once. grid (ceil(rows / kTileRows), ceil(out / kTileCols)), block kTileThreads.
struct GemmQuantParams {
  const void *x; // [rows, in], the kernel's dtype
  QuantSections w;
  const float *bias; // [out] fp32, or null
  void *y;           // [rows, out], the kernel's y_dtype
  int32_t rows;
  int32_t out;
};

// out[o, k] = w[o, k] in the kernel's dtype (rounded once), for a Linear of more rows than the
// GEMV takes: cuBLASLt then multiplies x by `out`. grid (ceil(rows * in / kQuantRun /
// kGemvThreads)), block kGemvThreads: one run of 32 values per thread.
struct DequantParams {
  QuantSections w;
  void *out; // [rows, in]
  int32_t rows;
};

} // namespace kiln::kernels::cuda
