// Paged attention for decode steps (every sequence has exactly one query token: numTokens ==
// numSeqs), GQA-aware and split-K ("flash-decoding"). plan.fbs Attention semantics: the token at
// position p attends to cache positions 0..p of its sequence, or to the last slidingWindow of
// them (attentionWindowStart in params.h); query head h reads kv head h / (H / KV);
// softmax(q.k * scale) v with fp32 accumulation.
//
// Grid rule (computed by the host from the step counts, not a plain GridRule):
//   decode: grid (numSeqs, NUM_KV_HEADS, numSplits), block kAttentionThreads, where numSplits =
//           decodeSplitsFor(maxContextLen) (params.h), or a larger fixed count in a CUDA graph:
//           CTAs past a sequence's own split count exit without writing (decodeSplit).
//   reduce: grid (numSeqs, NUM_HEADS), block kAttentionThreads; always launched after decode.
// One CTA per (sequence, kv head, split) serves the H / KV query heads that share the kv head, so
// each K/V row is read once for the whole group. The splits cut only the keys the token sees,
// [windowStart, contextLen): keys before a sliding window are never read. A sequence's split
// count and split length depend only on that visible length (decodeSplit), so its result is the
// same in any batch. A sequence that needs one split writes its output directly and the reduce
// kernel skips it.
//
// Inside a CTA: threads form kTokenLanes x kDimLanes; a token's q.k is kDimLanes partial dots
// summed with warp shuffles; scores of a tile of kDecodeTile tokens go to shared memory, each
// warp updates the online softmax of some heads, then every thread folds its tokens' v rows
// into a register accumulator that is rescaled per tile. The token lanes' accumulators are
// summed through shared memory at the end.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// kDecodeTile, DecodeSplit and decodeSplit() live in params.h, shared with the host.

// Lanes that split one head's dims: the largest power of two <= 32 dividing HEAD_DIM / kWide,
// so each lane reads whole 16-byte vectors.
template <typename T, int HEAD_DIM> constexpr int attentionDimLanes() {
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  int lanes = 1;
  while (lanes < 32 && (HEAD_DIM / kWide) % (2 * lanes) == 0)
    lanes *= 2;
  return lanes;
}

// KV: the cache's element type (T, or another with `--kv-dtype`). The lanes split a head's dims
// into whole 16-byte vectors of the wider of T and KV, so a narrower cache (fp8 under bf16) keeps
// the activations' lane count and shared memory, and loads 4 or 8 bytes a row slice.
template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int BLOCK_SIZE, typename KV>
struct PagedDecode {
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kGroup = NUM_HEADS / NUM_KV_HEADS;
  static constexpr int kDimLanes = attentionDimLanes<typename WiderOf<T, KV>::type, HEAD_DIM>();
  static constexpr int kVec = HEAD_DIM / kDimLanes;
  static constexpr int kTokenLanes = kThreads / kDimLanes;
  static_assert(NUM_HEADS % NUM_KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(HEAD_DIM % (16 / sizeof(T)) == 0 && HEAD_DIM % (16 / sizeof(KV)) == 0,
                "head dim must be a whole number of 16 bytes");

  // Tokens each thread handles per tile (token lanes stride through the tile).
  static constexpr int kTileIters = ceilDiv(kDecodeTile, kTokenLanes);

  struct alignas(16) RowSlice { // this thread's kVec cache elements of one row
    KV v[kVec];
  };
  static constexpr int kSliceBytes = static_cast<int>(kVec * sizeof(KV));

  // Staging (AttentionParams::kvStaging): each thread copies its slices of a tile's K and V rows
  // into its own shared-memory slots with asynchronous copies: the tile's V is requested with its
  // K, the next tile's K while this tile's softmax and V run, and no register holds them in
  // flight (loading them into registers instead cost 32 more registers a thread and a CTA per
  // SM, docs/benchmarks.md). A thread reads back only its own slots, so landing needs no barrier.
  struct Staged {
    RowSlice k[kTileIters][kThreads];
    RowSlice v[kTileIters][kThreads];
  };
  struct NotStaged {};
  static constexpr bool kCanStage = (kSliceBytes == 4 || kSliceBytes == 8 || kSliceBytes == 16) &&
                                    sizeof(Staged) + kGroup * (kDecodeTile + 3) * 4 <= 48 * 1024;
  using StageSlots = typename Select<kCanStage, Staged, NotStaged>::type;

  struct Shared {
    float scores[kGroup][kDecodeTile];
    float runningMax[kGroup];
    float runningSum[kGroup];
    float correction[kGroup];
    union { // the token lanes' partial sums are written after the last tile's V is read
      float partial[kTokenLanes][kGroup][HEAD_DIM];
      StageSlots stage;
    };
  };
  static_assert(sizeof(Shared) <= 48 * 1024,
                "decode attention: shared memory over 48 KiB for this head dim / group size");

  // This thread's kVec elements of rows tileStart + tokenLane + i * kTokenLanes (i < kTileIters)
  // of `cache`, all loads issued before any is used: a decode step is bound by how many bytes
  // are in flight, and one row at a time left the loads waiting on each other. Rows past `n`
  // read as zeros.
  static __device__ __forceinline__ void loadTileRows(const KV *cache, const int32_t *table,
                                                      int tileStart, int n,
                                                      RowSlice (&rows)[kTileIters]) {
    const int tokenLane = threadIdx.x / kDimLanes;
    const int dimLane = threadIdx.x % kDimLanes;
#pragma unroll
    for (int i = 0; i < kTileIters; ++i) {
      const int j = tokenLane + i * kTokenLanes;
      if (j < n) // the block table holds no entry past the sequence
        copyElements<KV, kVec>(cache + cacheOffset(table, tileStart + j) + dimLane * kVec,
                               rows[i].v);
      else
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          rows[i].v[e] = fromFloat<KV>(0.0f);
    }
  }

  // The same rows copied asynchronously into this thread's slots (not committed); rows past `n`
  // are not copied: their slots keep old bytes, whose scores are never stored nor used.
  static __device__ __forceinline__ void stageTileRows(const KV *cache, const int32_t *table,
                                                       int tileStart, int n,
                                                       RowSlice (&slots)[kTileIters][kThreads]) {
    const int tokenLane = threadIdx.x / kDimLanes;
    const int dimLane = threadIdx.x % kDimLanes;
#pragma unroll
    for (int i = 0; i < kTileIters; ++i) {
      const int j = tokenLane + i * kTokenLanes;
      if (j < n)
        asyncCopy<kSliceBytes>(slots[i][threadIdx.x].v,
                               cache + cacheOffset(table, tileStart + j) + dimLane * kVec);
    }
  }

  // The slice widened, times the layer's scale (common.cuh kvToFloat; only an fp8 cache has one).
  static __device__ __forceinline__ void toFloats(const RowSlice &row, float scale,
                                                  float (&out)[kVec]) {
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      out[e] = kvToFloat<KV>(row.v[e], scale);
  }

  // Scores of tile positions [tileStart, tileStart + n) into shared.scores (scaled); rowAt(i) is
  // this thread's slice of row tokenLane + i * kTokenLanes.
  template <typename RowAt>
  static __device__ __forceinline__ void scoreRows(const AttentionParams &p, RowAt rowAt,
                                                   const float (&q)[kGroup][kVec], int n,
                                                   Shared &sh) {
    const int tokenLane = threadIdx.x / kDimLanes;
    const int dimLane = threadIdx.x % kDimLanes;
#pragma unroll
    for (int i = 0; i < kTileIters; ++i) { // uniform trip count: shuffles below
      const int j = tokenLane + i * kTokenLanes;
      float k[kVec];
      toFloats(rowAt(i), p.kScale, k);
      float dots[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        dots[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          dots[g] += q[g][e] * k[e];
      }
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
#pragma unroll
        for (int offset = kDimLanes / 2; offset > 0; offset >>= 1)
          dots[g] += __shfl_xor_sync(0xffffffffu, dots[g], offset);
      if (j < n && dimLane == 0)
#pragma unroll
        for (int g = 0; g < kGroup; ++g)
          sh.scores[g][j] = softcapScore(dots[g] * p.scale, p.logitSoftcap);
    }
  }

  // acc += probabilities (shared.scores) x the tile's v rows (rowAt as in scoreRows).
  template <typename RowAt>
  static __device__ __forceinline__ void
  accumulateRows(RowAt rowAt, int n, float vScale, const Shared &sh, float (&acc)[kGroup][kVec]) {
    const int tokenLane = threadIdx.x / kDimLanes;
#pragma unroll
    for (int i = 0; i < kTileIters; ++i) {
      const int j = tokenLane + i * kTokenLanes;
      if (j >= n)
        break;
      float v[kVec];
      toFloats(rowAt(i), vScale, v);
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          acc[g][e] += sh.scores[g][j] * v[e];
    }
  }

  // Element offset of (pos, this CTA's kv head) in the layer's cache.
  static __device__ __forceinline__ int64_t cacheOffset(const int32_t *table, int pos) {
    const int64_t block = table[pos / BLOCK_SIZE];
    return ((block * NUM_KV_HEADS + blockIdx.y) * BLOCK_SIZE + pos % BLOCK_SIZE) * HEAD_DIM;
  }

  // Online softmax over one tile: scores become probabilities relative to the new running max.
  static __device__ __forceinline__ void softmaxTile(int n, Shared &sh) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    for (int g = warp; g < kGroup; g += kWarps) {
      float tileMax = negativeInfinity();
      for (int j = lane; j < n; j += 32)
        tileMax = fmaxf(tileMax, sh.scores[g][j]);
      tileMax = warpMax(tileMax);
      const float newMax = fmaxf(sh.runningMax[g], tileMax);
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float prob = expf(sh.scores[g][j] - newMax);
        sh.scores[g][j] = prob;
        sum += prob;
      }
      sum = warpSum(sum);
      __syncwarp();
      if (lane == 0) { // exp(-inf - finite) = 0 on the first tile
        const float correction = expf(sh.runningMax[g] - newMax);
        sh.correction[g] = correction;
        sh.runningSum[g] = sh.runningSum[g] * correction + sum;
        sh.runningMax[g] = newMax;
      }
    }
  }

  static __device__ __forceinline__ void rescale(const Shared &sh, float (&acc)[kGroup][kVec]) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        acc[g][e] *= sh.correction[g];
  }

  // The tiles of [start, end) with K and V loaded into registers, tile by tile.
  static __device__ __forceinline__ void
  attendLoaded(const AttentionParams &p, const int32_t *table, const float (&q)[kGroup][kVec],
               int start, int end, Shared &sh, float (&acc)[kGroup][kVec]) {
    for (int tileStart = start; tileStart < end; tileStart += kDecodeTile) {
      const int n = min(kDecodeTile, end - tileStart);
      RowSlice rows[kTileIters];
      __syncthreads(); // the previous tile's probabilities are consumed
      loadTileRows(static_cast<const KV *>(p.kCache), table, tileStart, n, rows);
      scoreRows(
          p, [&](int i) -> const RowSlice & { return rows[i]; }, q, n, sh);
      __syncthreads();
      softmaxTile(n, sh);
      __syncthreads();
      rescale(sh, acc);
      loadTileRows(static_cast<const KV *>(p.vCache), table, tileStart, n, rows);
      accumulateRows([&](int i) -> const RowSlice & { return rows[i]; }, n, p.vScale, sh, acc);
    }
  }

  // The same with K and V staged (Staged). Per tile, in this order: V(t) requested, K(t) awaited,
  // scores, K(t + 1) requested, softmax, V(t) awaited and summed. Each slot is overwritten only
  // after a __syncthreads that follows its last read.
  static __device__ __forceinline__ void
  attendStaged(const AttentionParams &p, const int32_t *table, const float (&q)[kGroup][kVec],
               int start, int end, Shared &sh, float (&acc)[kGroup][kVec]) {
    if constexpr (kCanStage) {
      const KV *kCache = static_cast<const KV *>(p.kCache);
      const KV *vCache = static_cast<const KV *>(p.vCache);
      const int threadSlot = threadIdx.x;
      stageTileRows(kCache, table, start, min(kDecodeTile, end - start), sh.stage.k);
      asyncCopyCommit();
      for (int tileStart = start; tileStart < end; tileStart += kDecodeTile) {
        const int n = min(kDecodeTile, end - tileStart);
        const int nextN = min(kDecodeTile, end - tileStart - kDecodeTile);
        __syncthreads(); // the previous tile's probabilities and V slots are consumed
        stageTileRows(vCache, table, tileStart, n, sh.stage.v);
        asyncCopyCommit();
        asyncCopyWait<1>(); // K(t)
        scoreRows(
            p, [&](int i) -> const RowSlice & { return sh.stage.k[i][threadSlot]; }, q, n, sh);
        __syncthreads();
        if (nextN > 0)
          stageTileRows(kCache, table, tileStart + kDecodeTile, nextN, sh.stage.k);
        asyncCopyCommit(); // empty after the last tile
        softmaxTile(n, sh);
        __syncthreads();
        rescale(sh, acc);
        asyncCopyWait<1>(); // V(t)
        accumulateRows([&](int i) -> const RowSlice & { return sh.stage.v[i][threadSlot]; }, n,
                       p.vScale, sh, acc);
      }
      asyncCopyWait<0>();
    }
  }

  static __device__ __forceinline__ void run(const AttentionParams &p) {
    __shared__ Shared sh;
    const int seq = blockIdx.x;
    if (seq >= p.numSeqs)
      return;
    const int token = p.queryStartLoc[seq];
    const int contextLen = p.positions[token] + 1;
    const int windowStart = attentionWindowStart(contextLen - 1, p.slidingWindow);
    const DecodeSplit split = decodeSplit(contextLen - windowStart, p.numSplits);
    if (static_cast<int>(blockIdx.z) >= split.count)
      return;
    const int start = windowStart + blockIdx.z * split.length;
    const int end = min(start + split.length, contextLen);
    const int32_t *table = p.blockTables + static_cast<int64_t>(seq) * p.maxBlocksPerSeq;
    const int tokenLane = threadIdx.x / kDimLanes;
    const int dimLane = threadIdx.x % kDimLanes;

    float q[kGroup][kVec];
    const T *qRow =
        static_cast<const T *>(p.q) + static_cast<int64_t>(token) * NUM_HEADS * HEAD_DIM;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const T *src = qRow + (blockIdx.y * kGroup + g) * HEAD_DIM + dimLane * kVec;
      if constexpr (kVec * sizeof(T) % 16 == 0)
        loadFloatsAligned<T, kVec>(src, q[g]);
      else // a cache wider than the activations (fp32 under bf16): lanes narrower than 16 bytes
        loadFloats<T, kVec>(src, q[g]);
    }
    for (int g = threadIdx.x; g < kGroup; g += kThreads) {
      sh.runningMax[g] = negativeInfinity();
      sh.runningSum[g] = 0.0f;
    }
    float acc[kGroup][kVec] = {};
    if (kCanStage && p.kvStaging)
      attendStaged(p, table, q, start, end, sh, acc);
    else
      attendLoaded(p, table, q, start, end, sh, acc);
    __syncthreads(); // every V slot is read: partial shares their memory
#pragma unroll
    for (int g = 0; g < kGroup; ++g)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        sh.partial[tokenLane][g][dimLane * kVec + e] = acc[g][e];
    __syncthreads();
    writeOutput(p, seq, token, split.count, sh);
  }

  // Sums the token lanes; one split: the normalized output, else the split's partial state.
  static __device__ __forceinline__ void writeOutput(const AttentionParams &p, int seq, int token,
                                                     int splits, const Shared &sh) {
    for (int index = threadIdx.x; index < kGroup * HEAD_DIM; index += kThreads) {
      const int g = index / HEAD_DIM;
      const int d = index % HEAD_DIM;
      float o = 0.0f;
      for (int lane = 0; lane < kTokenLanes; ++lane)
        o += sh.partial[lane][g][d];
      const int head = blockIdx.y * kGroup + g;
      if (splits == 1) {
        T *out = static_cast<T *>(p.out) + static_cast<int64_t>(token) * NUM_HEADS * HEAD_DIM;
        out[head * HEAD_DIM + d] = fromFloat<T>(o / sh.runningSum[g]);
        continue;
      }
      const int64_t state =
          (static_cast<int64_t>(seq) * NUM_HEADS + head) * kMaxDecodeSplits + blockIdx.z;
      p.partialOut[state * HEAD_DIM + d] = o;
      if (d == 0) {
        p.partialMax[state] = sh.runningMax[g];
        p.partialSum[state] = sh.runningSum[g];
      }
    }
  }
};

// Combines the splits of each (sequence, query head); grid (numSeqs, NUM_HEADS).
template <typename T, int NUM_HEADS, int HEAD_DIM>
__device__ __forceinline__ void pagedDecodeReduce(const AttentionParams &p) {
  const int seq = blockIdx.x;
  const int head = blockIdx.y;
  if (seq >= p.numSeqs)
    return;
  const int token = p.queryStartLoc[seq];
  const int position = p.positions[token];
  const DecodeSplit split =
      decodeSplit(position + 1 - attentionWindowStart(position, p.slidingWindow), p.numSplits);
  if (split.count == 1)
    return; // the decode kernel wrote this sequence's output
  const int64_t state = (static_cast<int64_t>(seq) * NUM_HEADS + head) * kMaxDecodeSplits;
  float globalMax = negativeInfinity();
  for (int i = 0; i < split.count; ++i)
    globalMax = fmaxf(globalMax, p.partialMax[state + i]);
  float weights[kMaxDecodeSplits];
  float sum = 0.0f;
  for (int i = 0; i < split.count; ++i) {
    weights[i] = expf(p.partialMax[state + i] - globalMax);
    sum += p.partialSum[state + i] * weights[i];
  }
  T *out = static_cast<T *>(p.out) + static_cast<int64_t>(token) * NUM_HEADS * HEAD_DIM +
           head * HEAD_DIM;
  for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < split.count; ++i)
      o += p.partialOut[(state + i) * HEAD_DIM + d] * weights[i];
    out[d] = fromFloat<T>(o / sum);
  }
}

} // namespace kiln::kernels::cuda
