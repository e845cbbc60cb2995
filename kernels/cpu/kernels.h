// CPU reference kernels: what CI runs and what every GPU kernel is checked against.
// FlashInfer-style: raw pointers and plain argument structs, no framework headers. Activations and
// the KV cache are row-major, densely packed and stored as fp32, fp16 or bf16 (each struct names
// the element type of its buffers; fp32 is the default, so an initialiser that names no type is
// an all-fp32 call). Every kernel computes in fp32 and rounds each output element once to its
// buffer's type (round to nearest even, as runtime/base/half.h). A worker pool splits rows/heads
// across threads (worker_pool.h); a row's result never depends on the other rows of the batch.
// Kernels trust their arguments: the executor validates counts, ids and block tables first.
#pragma once

#include "runtime/base/quant_layout.h"

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::cpu {

// Storage type of an activation, KV cache or weight buffer. kF8E4M3 (runtime/base/fp8.h) only
// for a KV cache (`--kv-dtype fp8`): RopeKvWrite rounds k and v to it, attention widens them.
enum class ElemType : uint8_t { kF32, kF16, kBF16, kF8E4M3 };
using WeightType = ElemType;

// A quantized weight matrix (runtime/base/quant_layout.h): groupSize > 0 says the weight pointer
// holds that layout in `format`, and the call's WeightType is not read.
struct QuantWeight {
  QuantFormat format = QuantFormat::kQ8;
  int32_t groupSize = 0; // 0: not quantized
  // A row slice of a larger stored matrix (a mixture-of-experts layer's stacked experts): the
  // weight pointer is that matrix's first byte, laid out for `matrixRows` rows (0: the slice's own
  // row count, i.e. no slice), and the slice starts at row `firstRow`.
  int64_t matrixRows = 0;
  int64_t firstRow = 0;
};

// out[t] = table[tokenIds[t] - vocabStart] for ids in [vocabStart, vocabStart + vocabSize), else
// zeros: a vocab-parallel rank holds only its rows and an all_reduce sums the ranks' outputs.
struct EmbeddingArgs {
  const int32_t *tokenIds;
  int32_t numTokens;
  const void *table; // [vocabSize, hidden]
  WeightType tableType;
  int32_t vocabSize;
  int32_t hidden;
  void *out;              // [numTokens, hidden]
  int32_t vocabStart = 0; // the id of table row 0
  ElemType outType = ElemType::kF32;
  QuantWeight quant; // a quantized table: each row dequantized, rounded once to outType
  float scale = 1.0f; // each row times scale in fp32, then rounded to outType (Gemma)
};
void embedding(const EmbeddingArgs &args);

// out = x / sqrt(mean(x^2) + eps) * weight  (computed as transformers does: fp32 variance)
struct RmsNormArgs {
  const void *x;
  const float *weight; // [hidden], fp32
  void *out;
  int32_t rows;
  int32_t hidden;
  float eps;
  ElemType type = ElemType::kF32; // of x and out
};
void rmsNorm(const RmsNormArgs &args);

// residual += x (in place, rounded to `type`); out = RmsNorm(residual as stored) * weight
struct AddRmsNormArgs {
  const void *x;
  void *residual;
  const float *weight;
  void *out;
  int32_t rows;
  int32_t hidden;
  float eps;
  ElemType type = ElemType::kF32; // of x, residual and out
};
void addRmsNorm(const AddRmsNormArgs &args);

// out[r, o] = sum_i x[r, i] * weight[o, i] (+ bias[o]), fp32 accumulation, rounded once to outType
// (the lm_head reads half activations and writes fp32 logits).
// Batch invariant: a row's outputs are bit-identical whatever `rows` is and wherever the row sits.
struct LinearArgs {
  const void *x;      // [rows, inFeatures]
  const void *weight; // [outFeatures, inFeatures]
  WeightType weightType;
  const float *bias; // [outFeatures] or nullptr
  void *out;         // [rows, outFeatures]
  int32_t rows;
  int32_t inFeatures;
  int32_t outFeatures;
  ElemType xType = ElemType::kF32;
  ElemType outType = ElemType::kF32;
  // packLinearWeights' form of `weight`, or null. Read only at the level it was packed for;
  // `weight` must stay valid too (another level reads it).
  const void *packedWeight = nullptr;
  // A quantized weight (kernels/cpu/linear_quant.cc): never dequantized into a copy. Packed into
  // panels (from avx512 up) each group's sum of x times the stored integers is scaled once;
  // otherwise each weight is dequantized to its exact fp32 value inside the dot product.
  QuantWeight quant;
};
void linear(const LinearArgs &args);

// Some levels read a Linear's weights faster in a layout of their own (amx: bf16 weights as the
// tiles' pair layout, kernels/cpu/linear_amx.cc; avx512 and up: fp32 weights as 32-output panels,
// kernels/cpu/linear_panels_avx512.cc, and quantized ones as 16-output panels,
// kernels/cpu/linear_quant.h), made once when the op is prepared: the bytes of that form at the
// active level (0: the level reads the weights as stored, nothing to pack), and the packing, into
// `packed` of that many bytes (4-byte aligned; the cpu device gives it 64). `quant` as in
// LinearArgs: with groupSize > 0, `type` is not read.
size_t linearPackedWeightBytes(WeightType type, int32_t outFeatures, int32_t inFeatures,
                               QuantWeight quant = {});
void packLinearWeights(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                       void *packed, QuantWeight quant = {});

// How RopeKvWrite picks a token's inverse frequencies (compiler/import/rope_scaling.h RopeTables:
// which transformers rope type needs which). L is the length of the token's sequence after the
// step: positions[its last token in the step] + 1 (queryStartLoc gives the sequences).
enum class RopeMode : int32_t {
  kStatic = 0,     // invFreq[rotaryDim / 2] for every token
  kLongShort = 1,  // invFreq = [short | long]: the long row when L > originalMaxPositions
  kDynamicNtk = 2, // invFreq while L <= originalMaxPositions, else dynamicNtkInvFreq(..., L)
};

// Rotates q and k (HF rotate_half convention, first rotaryDim dims of each head), writes rotated
// k and raw v into the paged cache at slotMapping[t], and rotated q to `q`. A negative slot
// (a padding token) rotates q and writes nothing to the cache. The angle of pair i is
// float(position) * inv_freq[i] in fp32; cos and sin are multiplied by attentionScaling (yarn,
// longrope), as transformers' rotary embeddings do.
// Cache layout per layer: [numBlocks][numKvHeads][blockSize][headDim]; slot = block*blockSize+off.
struct RopeKvWriteArgs {
  const void *qkv;            // [numTokens, (numHeads + 2*numKvHeads) * headDim]
  const int32_t *positions;   // [numTokens]
  const int32_t *slotMapping; // [numTokens]
  const float *invFreq;       // [rotaryDim / 2]
  void *q;                    // [numTokens, numHeads * headDim]
  void *kCache;               // this layer's K blocks
  void *vCache;               // this layer's V blocks
  int32_t numTokens;
  int32_t numHeads;
  int32_t numKvHeads;
  int32_t headDim;
  int32_t rotaryDim;
  int32_t blockSize;
  ElemType type = ElemType::kF32;   // of qkv and q
  ElemType kvType = ElemType::kF32; // of the cache
  // Run-time scaling; the defaults are plain RoPE. A token past queryStartLoc[numSeqs] (none in
  // a valid step) takes L = its own position + 1.
  RopeMode mode = RopeMode::kStatic;
  const int32_t *queryStartLoc = nullptr; // [numSeqs + 1]; read unless kStatic
  int32_t numSeqs = 0;
  int32_t originalMaxPositions = 0; // kLongShort, kDynamicNtk: rows switch when L exceeds it
  float ropeTheta = 0.0f;           // kDynamicNtk
  double dynamicFactor = 1.0;       // kDynamicNtk (transformers rounds factor - 1 from the double)
  float attentionScaling = 1.0f;
  // L of each sequence ([numSeqs], plan.fbs SequenceLengths: all its known tokens, so a prompt
  // rotates alike in one prefill or in chunks); null: positions[its last token in the step] + 1.
  const int32_t *sequenceLengths = nullptr;
  // Per-head RMSNorm before rotation (Qwen3): every q head becomes RmsNorm(head) * qNorm and every
  // k head RmsNorm(head) * kNorm ([headDim] fp32 each, eps qkNormEps), as transformers'
  // Qwen3RMSNorm in fp32. Null: none.
  const float *qNorm = nullptr;
  const float *kNorm = nullptr;
  float qkNormEps = 0.0f;
  // The layer's cache scales (plan.fbs KvCacheSpec.k_scales / v_scales, only for an fp8 cache):
  // rotated k and v are divided by them, in fp32, before they are rounded to kvType.
  float kScale = 1.0f;
  float vScale = 1.0f;
};
void ropeKvWrite(const RopeKvWriteArgs &args);

// Dynamic-NTK inverse frequencies [rotaryDim / 2] of a sequence of seqLen > maxPositions tokens,
// with transformers' float32 steps: base' = theta * ((factor * L / maxPositions) - (factor - 1))
// ^ (rotaryDim / (rotaryDim - 2)), inv_freq[i] = 1 / base'^(2i / rotaryDim).
void dynamicNtkInvFreq(float ropeTheta, double factor, int32_t maxPositions, int32_t rotaryDim,
                       int32_t seqLen, float *invFreq);

// Causal attention over the paged cache, prefill and decode tokens mixed. Token t of sequence s
// (queryStartLoc[s] <= t < queryStartLoc[s+1]) at position positions[t] attends to cache positions
// 0..positions[t] of sequence s through blockTables[s * maxBlocksPerSeq + p / blockSize]; with a
// sliding window W > 0 (Mistral, Phi-3) only to max(0, positions[t] - W + 1)..positions[t], the
// last W positions (transformers' sliding-window mask: query - key < W).
// Query head h uses KV head h / (numHeads / numKvHeads). Batch invariant: a token's output is
// bit-identical whatever else is in the batch. contextLens is not read (positions bound the range).
struct AttentionArgs {
  const void *q;                // [numTokens, numHeads * headDim]
  const int32_t *positions;     // [numTokens]
  const int32_t *queryStartLoc; // [numSeqs + 1]
  const int32_t *contextLens;   // [numSeqs]
  const int32_t *blockTables;   // [numSeqs, maxBlocksPerSeq]
  int32_t maxBlocksPerSeq;
  const void *kCache;
  const void *vCache;
  void *out; // [numTokens, numHeads * headDim]
  int32_t numSeqs;
  int32_t numTokens;
  int32_t numHeads;
  int32_t numKvHeads;
  int32_t headDim;
  int32_t blockSize;
  float scale;
  ElemType type = ElemType::kF32;   // of q and out
  ElemType kvType = ElemType::kF32; // of the cache
  int32_t slidingWindow = 0;        // W: positions each token sees, itself included; 0 = all
  float logitSoftcap = 0.0f;        // c > 0: each score s becomes tanh(s / c) * c (Gemma 2)
  // The layer's cache scales (plan.fbs KvCacheSpec.k_scales / v_scales, only for an fp8 cache):
  // cached k and v are widened to fp32, then multiplied by them.
  float kScale = 1.0f;
  float vScale = 1.0f;
};
void attention(const AttentionArgs &args);

// out[r, i] = silu(gu[r, i]) * gu[r, intermediate + i]
struct SiluMulArgs {
  const void *gateUp; // [rows, 2 * intermediate]
  void *out;          // [rows, intermediate]
  int32_t rows;
  int32_t intermediate;
  ElemType type = ElemType::kF32; // of gateUp and out
};
void siluMul(const SiluMulArgs &args);
// out[r, i] = gelu_tanh(gu[r, i]) * gu[r, intermediate + i], gelu_tanh(x) = 0.5 x (1 + tanh(
// sqrt(2/pi) (x + 0.044715 x^3))) in fp32 as torch's gelu(approximate="tanh") (GeGLU; Gemma).
void geluTanhMul(const SiluMulArgs &args);

// A mixture-of-experts MLP (schema/plan.fbs MoeExperts): each row's top_k experts by
// softmax(routerLogits), their probabilities renormalized to sum 1 when `renormalize`, and
// out = sum over them in increasing expert index of p * down(silu(gate x) * up x). gateUp holds
// expert e's [gate | up] rows at e * 2 * intermediate, down its rows at e * hidden. The experts'
// products run through `linear` over the rows routed to them, so a row's result does not depend
// on the others; half types round where separate Linear / SiluMul ops would.
struct MoeExpertsArgs {
  const void *x;            // [rows, hidden]
  const void *routerLogits; // [rows, numExperts], in `type`
  const void *gateUp;       // [numExperts * 2 * intermediate, hidden]
  const void *down;         // [numExperts * hidden, intermediate]
  WeightType weightType;
  void *out; // [rows, hidden]
  int32_t rows;
  int32_t hidden;
  int32_t intermediate;
  int32_t numExperts;
  int32_t topK;
  bool renormalize;
  ElemType type = ElemType::kF32; // of x and out
  // packMoeWeights' form of gateUp and down, or null (read only at the level it was packed for).
  const void *packed = nullptr;
  // Quantized experts (groupSize > 0; weightType then not read): each stacked matrix in the
  // layout of runtime/base/quant_layout.h, read in place (matrixRows / firstRow set per expert).
  QuantWeight gateUpQuant;
  QuantWeight downQuant;
};
void moeExperts(const MoeExpertsArgs &args);
// The experts' matrices in the Linear kernel's own layout at the active level
// (packLinearWeights), expert by expert at 64-byte aligned strides, gate_up's then down's: the
// bytes that takes (0: the level reads them as stored), and the packing. Quantized experts as in
// MoeExpertsArgs.
size_t moePackedWeightBytes(WeightType type, int32_t experts, int32_t hidden, int32_t intermediate,
                            QuantWeight gateUpQuant = {}, QuantWeight downQuant = {});
void packMoeWeights(const void *gateUp, const void *down, WeightType type, int32_t experts,
                    int32_t hidden, int32_t intermediate, void *packed,
                    QuantWeight gateUpQuant = {}, QuantWeight downQuant = {});

// out = (x - mean) / sqrt(var + eps) * weight + bias per row (biased variance), in fp32 as torch's
// layer_norm (encoders: BERT, XLM-R); out may be x.
struct LayerNormArgs {
  const void *x;
  const float *weight; // [hidden], fp32
  const float *bias;   // [hidden], fp32
  void *out;
  int32_t rows;
  int32_t hidden;
  float eps;
  ElemType type = ElemType::kF32; // of x and out
};
void layerNorm(const LayerNormArgs &args);

// out = 0.5 x (1 + erf(x / sqrt(2))) over count elements, in fp32 (transformers' exact "gelu");
// out may be x.
struct GeluArgs {
  const void *x;
  void *out;
  int64_t count;
  ElemType type = ElemType::kF32;
};
void gelu(const GeluArgs &args);

// out = a + sigmoid(x . weight) * b per row (Qwen2-MoE's gated shared expert): the dot in fp32 in
// index order, the gate 1 / (1 + e^-dot), each element a + gate * b in fp32 rounded once to type.
struct SigmoidGatedAddArgs {
  const void *a;
  const void *b;
  const void *x;
  const float *weight; // [width]
  void *out;
  int32_t rows;
  int32_t width;
  ElemType type = ElemType::kF32; // of a, b, x and out
};
void sigmoidGatedAdd(const SigmoidGatedAddArgs &args);

// out = tanh(x / cap) * cap over count elements, in fp32 (Gemma 2's final logit soft-capping);
// out may be x.
struct SoftcapArgs {
  const void *x;
  void *out;
  int64_t count;
  float cap;
  ElemType type = ElemType::kF32;
};
void softcap(const SoftcapArgs &args);

struct AddArgs {
  const void *a;
  const void *b;
  void *out;
  int64_t count;
  ElemType type = ElemType::kF32; // of a, b and out
};
void add(const AddArgs &args);

// out[i] = x[indices[i]]
struct GatherRowsArgs {
  const void *x;
  const int32_t *indices;
  void *out;
  int32_t numRows;
  int32_t width;
  ElemType type = ElemType::kF32; // of x and out
};
void gatherRows(const GatherRowsArgs &args);

} // namespace kiln::kernels::cpu
