// Paged causal attention, prefill and decode mixed, one (token, query head) pair per work item.
// Online softmax over the cache positions the token sees (from its sliding window's start, else
// from 0, up to its own position) in chunks of at most kChunk positions: per thread the scratch is
// headDim + kChunk floats (plus, for half q or cache, the widened query and one chunk of keys and
// values), whatever the context length. A pair's result depends only on its own query, position
// and sequence's blocks, so it is bit-identical however the batch is composed. Half inputs are
// widened and folded by the same fp32 code as fp32 inputs, so they give the same fp32 result.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// Scratch floats per thread: acc and scores always; the widened query and one chunk of K and V
// when q or the cache is half.
int64_t scratchFloats(const AttentionArgs &args) {
  const int64_t base = args.headDim + kChunk;
  const bool widen = args.type != ElemType::kF32 || args.kvType != ElemType::kF32;
  return widen ? base + args.headDim + 2 * int64_t(kChunk) * args.headDim : base;
}

void attendOne(const AttentionArgs &args, int32_t token, int32_t head, int32_t seq,
               float *scratch) {
  const int32_t headDim = args.headDim;
  const int64_t rowStride = static_cast<int64_t>(args.numHeads) * headDim;
  const int64_t qOffset = token * rowStride + head * headDim;
  float *widened = scratch + headDim + kChunk; // [q | keys chunk | values chunk] when widening
  const float *q = static_cast<const float *>(args.q) + qOffset;
  if (args.type != ElemType::kF32) {
    loadRun(args.q, args.type, qOffset, headDim, widened);
    q = widened;
  }
  const bool halfCache = args.kvType != ElemType::kF32;
  float *keyChunk = widened + headDim;
  float *valueChunk = keyChunk + int64_t(kChunk) * headDim;
  const int32_t kvHead = head / (args.numHeads / args.numKvHeads);
  const int32_t *blockTable = args.blockTables + static_cast<int64_t>(seq) * args.maxBlocksPerSeq;
  const int64_t blockStride = static_cast<int64_t>(args.numKvHeads) * args.blockSize * headDim;
  const int64_t headOffset = static_cast<int64_t>(kvHead) * args.blockSize * headDim;
  OnlineSoftmax state;
  state.acc = scratch;
  float *scores = scratch + headDim;
  std::fill(state.acc, state.acc + headDim, 0.0f);
  const int32_t position = args.positions[token];
  const int32_t length = position + 1;
  const int32_t window = args.slidingWindow;
  const int32_t first = window > 0 && position >= window ? position - window + 1 : 0;
  for (int32_t start = first, n = 0; start < length; start += n) {
    // A chunk never crosses a block boundary: cut it at the end of the current block.
    const int32_t offset = start % args.blockSize;
    n = std::min({kChunk, args.blockSize - offset, length - start});
    const int64_t base = blockTable[start / args.blockSize] * blockStride + headOffset +
                         static_cast<int64_t>(offset) * headDim;
    const float *keys = static_cast<const float *>(args.kCache) + base;
    const float *values = static_cast<const float *>(args.vCache) + base;
    if (halfCache) { // the chunk's positions are contiguous in the block: one run each
      loadRun(args.kCache, args.kvType, base, int64_t(n) * headDim, keyChunk);
      loadRun(args.vCache, args.kvType, base, int64_t(n) * headDim, valueChunk);
      keys = keyChunk;
      values = valueChunk;
    }
    foldChunk(q, keys, values, n, headDim, args.scale, scores, state);
  }
  // acc is dead after this: normalise in place, then store once in the output's type.
  for (int32_t d = 0; d < headDim; ++d)
    state.acc[d] = state.acc[d] / state.sum;
  storeRun(state.acc, headDim, args.out, args.type, qOffset);
}

} // namespace

void attention(const AttentionArgs &args) {
  const int64_t pairs = static_cast<int64_t>(args.numTokens) * args.numHeads;
  // Work per pair grows with its position, so hand pairs out dynamically.
  DynamicRanges chunks(pairs, 4);
  parallelRun(pairs > 1, [&](int, int) {
    float *scratch = threadScratch(static_cast<size_t>(scratchFloats(args)));
    for (IndexRange chunk; chunks.next(chunk);) {
      for (int64_t pair = chunk.begin; pair < chunk.end; ++pair) {
        const int32_t token = static_cast<int32_t>(pair / args.numHeads);
        const int32_t head = static_cast<int32_t>(pair % args.numHeads);
        const int32_t *loc = args.queryStartLoc;
        const int32_t seq =
            static_cast<int32_t>(std::upper_bound(loc, loc + args.numSeqs + 1, token) - loc) - 1;
        attendOne(args, token, head, seq, scratch);
      }
    }
  });
}

} // namespace kiln::kernels::cpu
