// CPU reference kernels: what CI runs and what every GPU kernel is checked against.
// FlashInfer-style: raw pointers and plain argument structs, no framework headers. Activations are
// fp32, row-major, densely packed; accumulation is fp32. OpenMP parallelises over rows/heads.
// Kernels trust their arguments: the executor validates counts, ids and block tables first.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

enum class WeightType : uint8_t { kF32, kF16, kBF16 };

// out[t] = table[tokenIds[t] - vocabStart] for ids in [vocabStart, vocabStart + vocabSize), else
// zeros: a vocab-parallel rank holds only its rows and an all_reduce sums the ranks' outputs.
struct EmbeddingArgs {
  const int32_t *tokenIds;
  int32_t numTokens;
  const void *table;  // [vocabSize, hidden]
  WeightType tableType;
  int32_t vocabSize;
  int32_t hidden;
  float *out;         // [numTokens, hidden]
  int32_t vocabStart = 0;  // the id of table row 0
};
void embedding(const EmbeddingArgs &args);

// out = x / sqrt(mean(x^2) + eps) * weight  (computed as transformers does: fp32 variance)
struct RmsNormArgs {
  const float *x;
  const float *weight;  // [hidden], fp32
  float *out;
  int32_t rows;
  int32_t hidden;
  float eps;
};
void rmsNorm(const RmsNormArgs &args);

// residual += x (in place); out = RmsNorm(residual) * weight
struct AddRmsNormArgs {
  const float *x;
  float *residual;
  const float *weight;
  float *out;
  int32_t rows;
  int32_t hidden;
  float eps;
};
void addRmsNorm(const AddRmsNormArgs &args);

// out[r, o] = sum_i x[r, i] * weight[o, i] (+ bias[o])
// Batch invariant: a row's outputs are bit-identical whatever `rows` is and wherever the row sits.
struct LinearArgs {
  const float *x;       // [rows, inFeatures]
  const void *weight;   // [outFeatures, inFeatures]
  WeightType weightType;
  const float *bias;    // [outFeatures] or nullptr
  float *out;           // [rows, outFeatures]
  int32_t rows;
  int32_t inFeatures;
  int32_t outFeatures;
};
void linear(const LinearArgs &args);

// Rotates q and k (HF rotate_half convention, first rotaryDim dims of each head), writes rotated
// k and raw v into the paged cache at slotMapping[t], and rotated q to `q`. A negative slot
// (a padding token) rotates q and writes nothing to the cache.
// Cache layout per layer: [numBlocks][numKvHeads][blockSize][headDim]; slot = block*blockSize+off.
struct RopeKvWriteArgs {
  const float *qkv;            // [numTokens, (numHeads + 2*numKvHeads) * headDim]
  const int32_t *positions;    // [numTokens]
  const int32_t *slotMapping;  // [numTokens]
  const float *invFreq;        // [rotaryDim / 2]
  float *q;                    // [numTokens, numHeads * headDim]
  float *kCache;               // this layer's K blocks
  float *vCache;               // this layer's V blocks
  int32_t numTokens;
  int32_t numHeads;
  int32_t numKvHeads;
  int32_t headDim;
  int32_t rotaryDim;
  int32_t blockSize;
};
void ropeKvWrite(const RopeKvWriteArgs &args);

// Causal attention over the paged cache, prefill and decode tokens mixed. Token t of sequence s
// (queryStartLoc[s] <= t < queryStartLoc[s+1]) at position positions[t] attends to cache positions
// 0..positions[t] of sequence s through blockTables[s * maxBlocksPerSeq + p / blockSize].
// Query head h uses KV head h / (numHeads / numKvHeads). Batch invariant: a token's output is
// bit-identical whatever else is in the batch. contextLens is not read (positions bound the range).
struct AttentionArgs {
  const float *q;                // [numTokens, numHeads * headDim]
  const int32_t *positions;      // [numTokens]
  const int32_t *queryStartLoc;  // [numSeqs + 1]
  const int32_t *contextLens;    // [numSeqs]
  const int32_t *blockTables;    // [numSeqs, maxBlocksPerSeq]
  int32_t maxBlocksPerSeq;
  const float *kCache;
  const float *vCache;
  float *out;                    // [numTokens, numHeads * headDim]
  int32_t numSeqs;
  int32_t numTokens;
  int32_t numHeads;
  int32_t numKvHeads;
  int32_t headDim;
  int32_t blockSize;
  float scale;
};
void attention(const AttentionArgs &args);

// out[r, i] = silu(gu[r, i]) * gu[r, intermediate + i]
struct SiluMulArgs {
  const float *gateUp;  // [rows, 2 * intermediate]
  float *out;           // [rows, intermediate]
  int32_t rows;
  int32_t intermediate;
};
void siluMul(const SiluMulArgs &args);

struct AddArgs {
  const float *a;
  const float *b;
  float *out;
  int64_t count;
};
void add(const AddArgs &args);

// out[i] = x[indices[i]]
struct GatherRowsArgs {
  const float *x;
  const int32_t *indices;
  float *out;
  int32_t numRows;
  int32_t width;
};
void gatherRows(const GatherRowsArgs &args);

} // namespace kiln::kernels::cpu
