// Paged causal attention, prefill and decode mixed. Each (token, query head) pair folds the cache
// positions it sees (from its sliding window's start, else from 0, up to its own position) into
// an online softmax in chunks of at most kChunk positions, never across a cache block. Pairs are
// worked in items (attendItem): up to kTokenBlock tokens of one sequence times the query heads of
// one kv head, which read, and for a half cache widen, each cache block once for all their pairs
// (it used to be once per pair). A pair folds the same chunks in the same order whatever item it
// is in, so its result depends only on its own query, position and sequence's blocks: it is
// bit-identical however the batch is composed. Half inputs are widened and folded by the same
// fp32 code as fp32 inputs, so they give the same fp32 result. Within a chunk, scores are computed
// four positions at a time and the values accumulated with a block of columns held in registers,
// at the CPU's instruction-set level (attention_chunk.h: 4 lanes at the baseline, 8 with AVX2 +
// FMA): prefill attention was bound by one chain of adds per dot product and by the accumulator's
// round trip through memory at every position. From AVX2 up a (token, head) pair a lane does it
// instead where head and block sizes are multiples of 16 (attention_f32_avx2.cc,
// attention_f32_avx512.cc; the loops of attention_chunk.h otherwise), and bf16 queries over a bf16
// cache run on AMX tiles when the CPU has them (attention_amx.cc). Soft-capped scores (Gemma 2:
// tanh(s / c) * c) are folded by the chunked path only.
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_chunk.h"
#include "kernels/cpu/attention_f32_lanes.h"
#include "kernels/cpu/attention_items.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/softcap.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using attention_chunk::ChunkKernels;
using attention_chunk::chunkKernelsFor;

constexpr int32_t kChunk = 32;

struct OnlineSoftmax {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  float *acc; // [headDim], running sum of exp(score - max) * v
};

// Folds positions [0, n) of one cache block run (keys/values headDim apart) into the state.
void foldChunk(const ChunkKernels &kernels, const float *q, const float *keys, const float *values,
               int32_t n, int32_t headDim, float scale, float softcap, float *scores,
               OnlineSoftmax &state) {
  kernels.score(q, keys, n, headDim, scale, scores);
  if (softcap > 0.0f) // as transformers' eager Gemma 2: (s / c).tanh() * c
    for (int32_t j = 0; j < n; ++j)
      scores[j] = softcapValue(scores[j], softcap);
  float chunkMax = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < n; ++j)
    chunkMax = std::max(chunkMax, scores[j]);
  const float newMax = std::max(state.max, chunkMax);
  if (newMax > state.max) { // the first chunk rescales zeros: exp(-inf) = 0
    const float correction = std::exp(state.max - newMax);
    state.sum *= correction;
#pragma omp simd
    for (int32_t d = 0; d < headDim; ++d)
      state.acc[d] *= correction;
    state.max = newMax;
  }
  kernels.exponentiate(scores, n, newMax); // the chunk's weights from here on
  for (int32_t j = 0; j < n; ++j)
    state.sum += scores[j];
  kernels.accumulate(scores, values, n, headDim, state.acc);
}

// Work items: the query heads [head0, head0 + heads) of one kv head (its group, at most
// kMaxHeadsPerItem at a time, or one head when there are too few items to keep the threads busy)
// for up to kTokenBlock consecutive tokens of one sequence. The item reads (and for a half cache
// widens) each cache block once for all its (token, head) pairs; every pair still folds exactly the
// chunks it folded alone, in the same order, so its result does not depend on which pairs share its
// item.
constexpr int32_t kTokenBlock = 8;
constexpr int32_t kMaxHeadsPerItem = 16;

int32_t headsPerItem(const AttentionArgs &args) {
  return std::min(args.numHeads / args.numKvHeads, kMaxHeadsPerItem);
}

// Items of kTokenBlock tokens and a whole group of heads, or one head each when there are too
// few such items to keep the threads busy.
void workItems(const AttentionArgs &args, std::vector<AttentionItem> &items) {
  int64_t grouped = 0;
  for (int32_t seq = 0; seq < args.numSeqs; ++seq) {
    const int32_t tokens = args.queryStartLoc[seq + 1] - args.queryStartLoc[seq];
    grouped += int64_t((tokens + kTokenBlock - 1) / kTokenBlock) * args.numKvHeads;
  }
  const int32_t perItem = grouped >= 2 * int64_t(cpuThreads()) ? headsPerItem(args) : 1;
  attentionItems(args, kTokenBlock, perItem, items);
}

// Scratch floats per thread: per pair its accumulator and (widened) query, the scores of one
// chunk, and for a half cache one block of keys and values.
int64_t scratchFloats(const AttentionArgs &args) {
  const int64_t pairs = int64_t(kTokenBlock) * headsPerItem(args);
  const int64_t block =
      args.kvType != ElemType::kF32 ? 2 * int64_t(args.blockSize) * args.headDim : 0;
  return pairs * 2 * args.headDim + kChunk + block;
}

// The visible positions [first, length) of the token at `position`.
struct Visible {
  int32_t first, length;
};
Visible visibleOf(const AttentionArgs &args, int32_t position) {
  const int32_t window = args.slidingWindow;
  return {window > 0 && position >= window ? position - window + 1 : 0, position + 1};
}

void attendItem(const AttentionArgs &args, const ChunkKernels &kernels, const AttentionItem &item,
                float *scratch) {
  const int32_t headDim = args.headDim;
  const int32_t pairs = item.tokens * item.heads;
  const int64_t rowStride = static_cast<int64_t>(args.numHeads) * headDim;
  float *accs = scratch;                            // [pairs][headDim]
  float *queries = accs + int64_t(pairs) * headDim; // [pairs][headDim], when q is half
  float *scores = queries + int64_t(pairs) * headDim;
  float *keyBlock = scores + kChunk; // [blockSize][headDim], then values, when the cache is half
  float *valueBlock = keyBlock + int64_t(args.blockSize) * headDim;
  OnlineSoftmax states[kTokenBlock * kMaxHeadsPerItem];
  const float *q[kTokenBlock * kMaxHeadsPerItem];
  Visible visible[kTokenBlock];
  int32_t lo = std::numeric_limits<int32_t>::max(), hi = 0;
  for (int32_t t = 0; t < item.tokens; ++t) {
    visible[t] = visibleOf(args, args.positions[item.token0 + t]);
    lo = std::min(lo, visible[t].first);
    hi = std::max(hi, visible[t].length);
  }
  for (int32_t i = 0; i < pairs; ++i) {
    const int32_t t = i / item.heads, head = item.head0 + i % item.heads;
    const int64_t qOffset = (item.token0 + t) * rowStride + head * headDim;
    q[i] = static_cast<const float *>(args.q) + qOffset;
    if (args.type != ElemType::kF32) {
      loadRun(args.q, args.type, qOffset, headDim, queries + int64_t(i) * headDim);
      q[i] = queries + int64_t(i) * headDim;
    }
    states[i] = OnlineSoftmax{};
    states[i].acc = accs + int64_t(i) * headDim;
    std::fill(states[i].acc, states[i].acc + headDim, 0.0f);
  }
  const int32_t kvHead = item.head0 / (args.numHeads / args.numKvHeads);
  const int32_t *blockTable =
      args.blockTables + static_cast<int64_t>(item.seq) * args.maxBlocksPerSeq;
  const int64_t blockStride = static_cast<int64_t>(args.numKvHeads) * args.blockSize * headDim;
  const int64_t headOffset = static_cast<int64_t>(kvHead) * args.blockSize * headDim;
  const bool halfCache = args.kvType != ElemType::kF32;
  for (int32_t blockStart = lo / args.blockSize * args.blockSize; blockStart < hi;
       blockStart += args.blockSize) {
    const int32_t blockEnd = std::min(blockStart + args.blockSize, hi);
    const int32_t from = std::max(blockStart, lo); // positions [from, blockEnd) of this block
    const int64_t base = blockTable[blockStart / args.blockSize] * blockStride + headOffset;
    const float *keys = static_cast<const float *>(args.kCache) + base;
    const float *values = static_cast<const float *>(args.vCache) + base;
    if (halfCache) { // the block's positions are contiguous: one run each
      const int64_t skip = int64_t(from - blockStart) * headDim;
      const int64_t count = int64_t(blockEnd - from) * headDim;
      loadScaledRun(args.kCache, args.kvType, base + skip, count, args.kScale, keyBlock + skip);
      loadScaledRun(args.vCache, args.kvType, base + skip, count, args.vScale, valueBlock + skip);
      keys = keyBlock;
      values = valueBlock;
    }
    for (int32_t i = 0; i < pairs; ++i) {
      const Visible &v = visible[i / item.heads];
      // The pair's chunks inside this block, cut as if it were alone: from its first position,
      // at most kChunk long, never past the block or its own length.
      for (int32_t start = std::max(blockStart, v.first), n = 0;
           start < std::min(blockStart + args.blockSize, v.length); start += n) {
        n = std::min({kChunk, args.blockSize - (start - blockStart), v.length - start});
        const int64_t at = int64_t(start - blockStart) * headDim;
        foldChunk(kernels, q[i], keys + at, values + at, n, headDim, args.scale, args.logitSoftcap,
                  scores, states[i]);
      }
    }
  }
  for (int32_t i = 0; i < pairs; ++i) {
    const int32_t t = i / item.heads, head = item.head0 + i % item.heads;
    OnlineSoftmax &state = states[i];
    // acc is dead after this: normalise in place, then store once in the output's type.
    for (int32_t d = 0; d < headDim; ++d)
      state.acc[d] = state.acc[d] / state.sum;
    storeRun(state.acc, headDim, args.out, args.type,
             (item.token0 + t) * rowStride + head * headDim);
  }
}

} // namespace

void attentionItems(const AttentionArgs &args, int32_t maxTokens, int32_t maxHeads,
                    std::vector<AttentionItem> &items) {
  const int32_t group = args.numHeads / args.numKvHeads;
  items.clear();
  for (int32_t seq = 0; seq < args.numSeqs; ++seq)
    for (int32_t t = args.queryStartLoc[seq]; t < args.queryStartLoc[seq + 1]; t += maxTokens)
      for (int32_t kv = 0; kv < args.numKvHeads; ++kv)
        for (int32_t head = kv * group; head < (kv + 1) * group; head += maxHeads)
          items.push_back({seq, t, std::min(maxTokens, args.queryStartLoc[seq + 1] - t), head,
                           std::min(maxHeads, (kv + 1) * group - head)});
}

void attention(const AttentionArgs &args) {
  if (args.numTokens <= 0)
    return;
  // Soft-capped scores (Gemma 2) take the chunked path at every level.
  const bool lanes = args.logitSoftcap == 0.0f;
  if (lanes && activeCpuIsa() == CpuIsa::kAmx && attentionRunsOnAmx(args))
    return attentionAmx(args);
  if (lanes && activeCpuIsa() >= CpuIsa::kAvx512 && attentionRunsOnF32Lanes(args))
    return attentionF32LanesAvx512(args);
  if (lanes && activeCpuIsa() == CpuIsa::kAvx2 && attentionRunsOnF32Lanes(args))
    return attentionF32LanesAvx2(args);
  // Called from the engine thread once per layer and step: no allocation once warmed up.
  // (A named reference, not the thread_local itself, is what the workers' lambda must see.)
  thread_local std::vector<AttentionItem> callerItems;
  std::vector<AttentionItem> &items = callerItems;
  workItems(args, items);
  // Work per item grows with its positions, so hand items out dynamically.
  DynamicRanges chunks(static_cast<int64_t>(items.size()), 1);
  const ChunkKernels kernels = chunkKernelsFor(activeCpuIsa());
  parallelRun(items.size() > 1, [&](int, int) {
    float *scratch = threadScratch(static_cast<size_t>(scratchFloats(args)));
    for (IndexRange chunk; chunks.next(chunk);)
      for (int64_t i = chunk.begin; i < chunk.end; ++i)
        attendItem(args, kernels, items[static_cast<size_t>(i)], scratch);
  });
}

} // namespace kiln::kernels::cpu
