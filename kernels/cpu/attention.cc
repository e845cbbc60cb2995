// Paged causal attention, prefill and decode mixed, one (token, query head) pair per work item.
// Online softmax over the cache in chunks of at most kChunk positions: per thread the scratch is
// headDim + kChunk floats, whatever the context length. A pair's result depends only on its own
// query, position and sequence's blocks, so it is bit-identical however the batch is composed.
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

constexpr int32_t kChunk = 32;

struct OnlineSoftmax {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  float *acc; // [headDim], running sum of exp(score - max) * v
};

inline float dot(const float *a, const float *b, int32_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int32_t i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

// Folds positions [0, n) of one cache block run (keys/values headDim apart) into the state.
void foldChunk(const float *q, const float *keys, const float *values, int32_t n, int32_t headDim,
               float scale, float *scores, OnlineSoftmax &state) {
  float chunkMax = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < n; ++j) {
    scores[j] = dot(q, keys + static_cast<int64_t>(j) * headDim, headDim) * scale;
    chunkMax = std::max(chunkMax, scores[j]);
  }
  const float newMax = std::max(state.max, chunkMax);
  if (newMax > state.max) { // the first chunk rescales zeros: exp(-inf) = 0
    const float correction = std::exp(state.max - newMax);
    state.sum *= correction;
#pragma omp simd
    for (int32_t d = 0; d < headDim; ++d)
      state.acc[d] *= correction;
    state.max = newMax;
  }
  for (int32_t j = 0; j < n; ++j) {
    const float p = std::exp(scores[j] - newMax);
    state.sum += p;
    const float *v = values + static_cast<int64_t>(j) * headDim;
#pragma omp simd
    for (int32_t d = 0; d < headDim; ++d)
      state.acc[d] += p * v[d];
  }
}

void attendOne(const AttentionArgs &args, int32_t token, int32_t head, int32_t seq,
               float *scratch) {
  const int32_t headDim = args.headDim;
  const int64_t rowStride = static_cast<int64_t>(args.numHeads) * headDim;
  const float *q = args.q + token * rowStride + head * headDim;
  const int32_t kvHead = head / (args.numHeads / args.numKvHeads);
  const int32_t *blockTable = args.blockTables + static_cast<int64_t>(seq) * args.maxBlocksPerSeq;
  const int64_t blockStride = static_cast<int64_t>(args.numKvHeads) * args.blockSize * headDim;
  const int64_t headOffset = static_cast<int64_t>(kvHead) * args.blockSize * headDim;
  OnlineSoftmax state;
  state.acc = scratch;
  float *scores = scratch + headDim;
  std::fill(state.acc, state.acc + headDim, 0.0f);
  const int32_t length = args.positions[token] + 1;
  for (int32_t start = 0, n = 0; start < length; start += n) {
    // A chunk never crosses a block boundary: cut it at the end of the current block.
    const int32_t offset = start % args.blockSize;
    n = std::min({kChunk, args.blockSize - offset, length - start});
    const int64_t base = blockTable[start / args.blockSize] * blockStride + headOffset +
                         static_cast<int64_t>(offset) * headDim;
    foldChunk(q, args.kCache + base, args.vCache + base, n, headDim, args.scale, scores, state);
  }
  float *out = args.out + token * rowStride + head * headDim;
  for (int32_t d = 0; d < headDim; ++d)
    out[d] = state.acc[d] / state.sum;
}

} // namespace

void attention(const AttentionArgs &args) {
  const int64_t pairs = static_cast<int64_t>(args.numTokens) * args.numHeads;
#pragma omp parallel if (pairs > 1)
  {
    std::vector<float> scratch(static_cast<size_t>(args.headDim) + kChunk);
    // Work per pair grows with its position, so hand pairs out dynamically.
#pragma omp for schedule(dynamic, 4)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int32_t token = static_cast<int32_t>(pair / args.numHeads);
      const int32_t head = static_cast<int32_t>(pair % args.numHeads);
      const int32_t *loc = args.queryStartLoc;
      const int32_t seq =
          static_cast<int32_t>(std::upper_bound(loc, loc + args.numSeqs + 1, token) - loc) - 1;
      attendOne(args, token, head, seq, scratch.data());
    }
  }
}

} // namespace kiln::kernels::cpu
