// Paged causal attention for prefill and mixed steps (plan.fbs Attention), flash-style: a CTA
// holds a tile of kRows query rows of one sequence and one query head, walks the sequence's
// cache in tiles of kCols positions through its block table, and keeps an online softmax per
// row, so no score matrix is ever materialized. Ragged batches: the CTAs of sequence s are its
// ceil(tokens_s / kRows) row tiles, found from query_start_loc.
//
// Grid rule (computed by the host from the step counts): grid (ceil(numTokens / kRows) +
// numSeqs, NUM_HEADS), block kAttentionThreads, kRows = prefillBlockRows(HEAD_DIM, sizeof(T)).
// The x extent bounds the total number of row tiles; CTAs past the last tile exit.
//
// A row's result depends only on its own query, position and sequence's cache: other rows of
// the tile can only add KV tiles that are fully masked for it, which leave its state unchanged
// (correction exp(0) = 1, probabilities 0). Decode tokens in a mixed step are 1-row tiles.
//
// Sliding window (AttentionParams::slidingWindow > 0): the walk starts at the earliest window
// start of the tile's rows, so KV tiles no row sees are never read, and each row also masks the
// keys before its own window start. The kernel branches on the window once, into a second
// instance of the walk: the causal walk keeps its loop as it is.
//
// This is the SIMT kernel (fp32 FMA from shared memory), correct for any head dim that is a
// whole number of 16-byte vectors: it serves fp32 and the head dims the tensor-core kernel
// (attention_prefill_tc.cuh) does not; PagedPrefill at the end picks one.
#pragma once

#include "kiln/attention_prefill_tc.cuh"
#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// KV positions per tile: the largest of 32/16/8 whose Q, K, V and P tiles fit in 40 KiB.
template <typename T, int HEAD_DIM, int ROWS> constexpr int prefillBlockCols() {
  constexpr int kBudget = 40 * 1024;
  for (int cols = 32; cols > 8; cols /= 2)
    if ((ROWS + 2 * cols) * HEAD_DIM * static_cast<int>(sizeof(T)) + ROWS * cols * 4 <= kBudget)
      return cols;
  return 8;
}

// KV: the cache's element type (T, or another with `--kv-dtype`), widened when used.
template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int BLOCK_SIZE, typename KV>
struct PagedPrefillSimt {
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kRows = prefillBlockRows(HEAD_DIM, sizeof(T));
  static constexpr int kCols = prefillBlockCols<T, HEAD_DIM, kRows>();
  static constexpr int kRowThreads = kThreads / kRows; // threads sharing one query row
  static constexpr int kColsPerThread = kCols / kRowThreads;
  static constexpr int kDimsPerThread = HEAD_DIM / kRowThreads;
  static constexpr int kWide = static_cast<int>(16 / sizeof(T));
  static_assert(NUM_HEADS % NUM_KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(HEAD_DIM % kWide == 0 && HEAD_DIM % (16 / sizeof(KV)) == 0,
                "head dim must be a whole number of 16 bytes");
  static_assert(HEAD_DIM % kRowThreads == 0 && kCols % kRowThreads == 0, "tile shape");
  static_assert((kRows + 2 * kCols) * HEAD_DIM * sizeof(T) + kRows * (kCols + 1) * 4 <= 48 * 1024,
                "prefill attention: tiles over 48 KiB of shared memory");

  struct Shared {
    alignas(16) T q[kRows][HEAD_DIM];
    alignas(16) KV k[kCols][HEAD_DIM];
    alignas(16) KV v[kCols][HEAD_DIM];
    float probs[kRows][kCols];
    int positions[kRows]; // -1: row past the sequence's tokens
  };

  // Copies `rows` rows of HEAD_DIM elements (row r at src(r)) into dst, zero-filling the rest.
  template <int ROWS, typename E, typename Source>
  static __device__ __forceinline__ void loadTile(E (&dst)[ROWS][HEAD_DIM], int rows, Source src) {
    constexpr int kElementsPerVector = static_cast<int>(16 / sizeof(E));
    constexpr int kVectorsPerRow = HEAD_DIM / kElementsPerVector;
    for (int index = threadIdx.x; index < ROWS * kVectorsPerRow; index += kThreads) {
      const int r = index / kVectorsPerRow;
      const int c = (index % kVectorsPerRow) * kElementsPerVector;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < rows)
        value = *reinterpret_cast<const uint4 *>(src(r) + c);
      *reinterpret_cast<uint4 *>(&dst[r][c]) = value;
    }
  }

  static __device__ __forceinline__ void run(const AttentionParams &p) {
    __shared__ Shared sh;
    const PrefillTile tile = findPrefillTile<kRows>(p);
    if (tile.seq < 0)
      return;
    const int head = blockIdx.y;
    const int64_t rowStride = static_cast<int64_t>(NUM_HEADS) * HEAD_DIM;
    const T *q = static_cast<const T *>(p.q);
    loadTile<kRows>(sh.q, tile.rows,
                    [&](int r) { return q + (tile.firstToken + r) * rowStride + head * HEAD_DIM; });
    for (int r = threadIdx.x; r < kRows; r += kThreads)
      sh.positions[r] = r < tile.rows ? p.positions[tile.firstToken + r] : -1;
    __syncthreads();
    if (p.slidingWindow > 0)
      attend<true>(p, tile, sh);
    else
      attend<false>(p, tile, sh);
  }

  // Walks the KV tiles the rows see with an online softmax per row and writes the rows' outputs.
  template <bool WINDOWED>
  static __device__ __forceinline__ void attend(const AttentionParams &p, const PrefillTile &tile,
                                                Shared &sh) {
    const int head = blockIdx.y;
    const int kvHead = head / (NUM_HEADS / NUM_KV_HEADS);
    int lastPosition = -1;
    for (int r = 0; r < kRows; ++r)
      lastPosition = max(lastPosition, sh.positions[r]);
    int firstKey = 0; // the earliest key any row sees
    if constexpr (WINDOWED) {
      firstKey = lastPosition;
      for (int r = 0; r < tile.rows; ++r)
        firstKey = min(firstKey, attentionWindowStart(sh.positions[r], p.slidingWindow));
    }

    const int row = threadIdx.x / kRowThreads;
    const int sub = threadIdx.x % kRowThreads;
    const int position = sh.positions[row];
    const int rowFirstKey = WINDOWED ? attentionWindowStart(position, p.slidingWindow) : 0;
    float runningMax = negativeInfinity();
    float runningSum = 0.0f;
    float acc[kDimsPerThread] = {};
    const int32_t *table = p.blockTables + static_cast<int64_t>(tile.seq) * p.maxBlocksPerSeq;
    for (int kvStart = firstKey; kvStart <= lastPosition; kvStart += kCols) {
      const int cols = min(kCols, lastPosition + 1 - kvStart);
      __syncthreads(); // the previous tile's K, V and probabilities are consumed
      loadKv(p, table, kvHead, kvStart, cols, sh);
      __syncthreads();
      float scores[kColsPerThread];
      const float tileMax = scoreTile<WINDOWED>(sh, p, kvStart, position, rowFirstKey, scores);
      const float newMax = fmaxf(runningMax, tileMax);
      // A row with nothing visible yet keeps an empty state (avoids -inf - -inf).
      const bool empty = newMax == negativeInfinity();
      float tileSum = 0.0f;
#pragma unroll
      for (int c = 0; c < kColsPerThread; ++c) {
        const float prob = empty ? 0.0f : expf(scores[c] - newMax);
        sh.probs[row][sub + c * kRowThreads] = prob;
        tileSum += prob;
      }
      tileSum = rowSum(tileSum);
      const float correction = empty ? 1.0f : expf(runningMax - newMax);
      runningSum = runningSum * correction + tileSum;
      runningMax = newMax;
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kDimsPerThread; ++k)
        acc[k] *= correction;
        // Position-outer keeps one probability live and the dims unrolled (small code, few regs).
#pragma unroll 1
      for (int j = 0; j < cols; ++j) {
        const float prob = sh.probs[row][j];
#pragma unroll
        for (int k = 0; k < kDimsPerThread; ++k)
          acc[k] += prob * kvToFloat<KV>(sh.v[j][sub + k * kRowThreads], p.vScale);
      }
    }
    if (position < 0)
      return;
    const int64_t rowStride = static_cast<int64_t>(NUM_HEADS) * HEAD_DIM;
    T *out = static_cast<T *>(p.out) + (tile.firstToken + row) * rowStride + head * HEAD_DIM;
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k)
      out[sub + k * kRowThreads] = fromFloat<T>(acc[k] / runningSum);
  }

  // This thread's scaled scores of the KV tile at kvStart (-inf where masked) and their row's max.
  template <bool WINDOWED>
  static __device__ __forceinline__ float scoreTile(const Shared &sh, const AttentionParams &p,
                                                    int kvStart, int position, int rowFirstKey,
                                                    float (&scores)[kColsPerThread]) {
    const int row = threadIdx.x / kRowThreads;
    const int sub = threadIdx.x % kRowThreads;
    float tileMax = negativeInfinity();
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int j = sub + c * kRowThreads;
      scores[c] = negativeInfinity();
      // The causal mask also masks padded rows (position -1); a window adds its lower bound.
      bool visible = kvStart + j <= position;
      if constexpr (WINDOWED)
        visible = visible && kvStart + j >= rowFirstKey;
      if (visible) {
        float dot = 0.0f;
#pragma unroll 8
        for (int d = 0; d < HEAD_DIM; ++d)
          dot += toFloat<T>(sh.q[row][d]) * kvToFloat<KV>(sh.k[j][d], p.kScale);
        scores[c] = softcapScore(dot * p.scale, p.logitSoftcap);
      }
      tileMax = fmaxf(tileMax, scores[c]);
    }
    return rowMax(tileMax);
  }

  static __device__ __forceinline__ void loadKv(const AttentionParams &p, const int32_t *table,
                                                int kvHead, int kvStart, int cols, Shared &sh) {
    auto rowOf = [&](const void *cache, int j) {
      const int pos = kvStart + j;
      const int64_t block = table[pos / BLOCK_SIZE];
      return static_cast<const KV *>(cache) +
             ((block * NUM_KV_HEADS + kvHead) * BLOCK_SIZE + pos % BLOCK_SIZE) * HEAD_DIM;
    };
    loadTile<kCols>(sh.k, cols, [&](int j) { return rowOf(p.kCache, j); });
    loadTile<kCols>(sh.v, cols, [&](int j) { return rowOf(p.vCache, j); });
  }

  // Reductions over the kRowThreads consecutive lanes that share a row.
  static __device__ __forceinline__ float rowMax(float v) {
#pragma unroll
    for (int offset = kRowThreads / 2; offset > 0; offset >>= 1)
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
  }
  static __device__ __forceinline__ float rowSum(float v) {
#pragma unroll
    for (int offset = kRowThreads / 2; offset > 0; offset >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  }
};

template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int BLOCK_SIZE, typename KV>
struct PagedPrefill {
  static __device__ __forceinline__ void run(const AttentionParams &p) {
    if constexpr (prefillUsesTensorCores(HEAD_DIM, sizeof(T)))
      PagedPrefillTensorCores<T, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, KV>::run(p);
    else
      PagedPrefillSimt<T, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE, KV>::run(p);
  }
};

} // namespace kiln::kernels::cuda
