// Paged causal attention for prefill and mixed steps on tensor cores (fp16/bf16, head dims that
// are multiples of 16 up to 128; prefillUsesTensorCores in params.h): the same contract as the
// SIMT kernel in attention_prefill.cuh (grid, ragged tiles, causal mask, output rounded once),
// with kRows = 64 query rows per CTA, 16 per warp.
//
// Per KV tile of kCols positions, each warp computes its 16 x kCols scores S = Q K^T with warp
// matrix multiplies (Q held in registers for the whole sequence walk), turns them into
// probabilities P in shared memory (fp32 softmax) and accumulates O += P V in fp32 fragments that
// stay in registers. The multiply's inputs are 16-bit, so P goes in as two parts, P = hi + lo
// with hi = P rounded to T and lo = (P - hi) rounded to T: O then sees P to ~16 significant bits
// instead of 8 (bf16), which keeps the step within the fp32-softmax reference's tolerance (P
// rounded once, as FlashAttention does, moved TinyStories-656K's bf16 logits 0.16 from the cpu
// backend's) for a third more multiply work. The fragments' element layout is unspecified, so a row
// of O cannot be rescaled in place; the online softmax therefore rescales lazily: a row's reference
// max moves (and O makes a round trip through shared memory to be scaled) only when a tile's max
// exceeds it by more than kRescaleThreshold, so probabilities stay below e^8 and the sum exact in
// fp32. After the first tiles of a row that is rare. Only the final division by the row sum
// normalizes.
//
// Sliding window (AttentionParams::slidingWindow > 0): the CTA's walk starts at the earliest
// window start of its rows (KV tiles no row sees are never read), a warp skips the tiles before
// its rows' windows as it skips those past its rows' positions, and each row masks the keys
// before its own window start. The kernel branches on the window once, into a second instance of
// the walk: the causal walk keeps its loop as it is.
#pragma once

#include <mma.h>

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

namespace wmma = nvcuda::wmma;

// KV: the cache's element type (T, or another with `--kv-dtype`, converted to T in shared memory).
template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int BLOCK_SIZE, typename KV>
struct PagedPrefillTensorCores {
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpRows = 16;
  static constexpr int kRows = kWarps * kWarpRows;
  static constexpr int kCols = kRows / 2; // Q is staged in the K and V tiles before the walk
  static constexpr int kDimTiles = HEAD_DIM / 16;
  static constexpr int kColTiles = kCols / 16;
  static constexpr int kKvStride = HEAD_DIM + 8; // elements; padding staggers smem banks
  static constexpr int kScoreStride = kCols + 4; // floats
  static constexpr int kProbStride = kCols + 8;  // elements of T
  static constexpr int kOutStride = 16 + 4;      // floats
  static constexpr int kProbFloats = kWarpRows * kProbStride * 2 * sizeof(T) / 4; // hi and lo
  static constexpr int kScratchFloats =
      kWarpRows * kScoreStride > kProbFloats ? kWarpRows *kScoreStride : kProbFloats;
  static constexpr int kColsPerLane = kCols / 2; // two lanes share a row
  static constexpr float kRescaleThreshold = 8.0f;
  static_assert(kRows == prefillBlockRows(HEAD_DIM, sizeof(T)), "host and kernel tile rows");
  static_assert(prefillUsesTensorCores(HEAD_DIM, sizeof(T)), "fp16/bf16, head dim 16..128");
  static_assert(kWarpRows * kOutStride <= kScratchFloats, "an O tile fits the scratch");

  using FragQ = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
  using FragKt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
  using FragV = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
  using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

  struct Shared {
    alignas(128) T kv[2][kCols][kKvStride]; // K, V of one tile; all kRows rows of Q at first
    alignas(128) float scratch[kWarps][kScratchFloats]; // per warp: S, then P; O when rescaling
    int positions[kRows];                               // -1: row past the sequence's tokens
  };
  static_assert(sizeof(Shared) <= 48 * 1024, "prefill attention: over 48 KiB of shared memory");

  // Per-lane state of one query row (two lanes per row: lane / 2, columns by lane % 2).
  struct RowState {
    int position;
    int firstKey; // the row's window start; read only by the windowed walk
    float refMax;
    float sum;
  };

  // The keys the CTA walks, [first, last], and the part its warp's rows see.
  struct KvRange {
    int first;     // the earliest window start of the CTA's rows (0 without a window)
    int last;      // the latest position of the CTA's rows
    int warpFirst; // the earliest window start of this warp's rows
    int warpLast;  // the latest position of this warp's rows; -1: only padding rows
  };

  static __device__ __forceinline__ void run(const AttentionParams &p) {
    __shared__ Shared sh;
    const PrefillTile tile = findPrefillTile<kRows>(p);
    if (tile.seq < 0)
      return;
    const int head = blockIdx.y;
    const int kvHead = head / (NUM_HEADS / NUM_KV_HEADS);
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int64_t rowStride = static_cast<int64_t>(NUM_HEADS) * HEAD_DIM;
    const T *q = static_cast<const T *>(p.q) + head * HEAD_DIM;
    loadRows(&sh.kv[0][0][0], kRows, tile.rows,
             [&](int r) { return q + (tile.firstToken + r) * rowStride; });
    for (int r = threadIdx.x; r < kRows; r += kThreads)
      sh.positions[r] = r < tile.rows ? p.positions[tile.firstToken + r] : -1;
    __syncthreads();
    FragQ qf[kDimTiles];
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
      wmma::load_matrix_sync(qf[d], &sh.kv[0][0][0] + warp * kWarpRows * kKvStride + d * 16,
                             kKvStride);
    const KvRange range = kvRange(sh, p.slidingWindow);
    const int position = sh.positions[warp * kWarpRows + lane / 2];
    RowState row{position, attentionWindowStart(position, p.slidingWindow), negativeInfinity(),
                 0.0f};
    FragAcc o[kDimTiles];
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
      wmma::fill_fragment(o[d], 0.0f);
    const int32_t *table = p.blockTables + static_cast<int64_t>(tile.seq) * p.maxBlocksPerSeq;
    if (p.slidingWindow > 0)
      walk<true>(p, table, kvHead, range, qf, row, o, sh);
    else
      walk<false>(p, table, kvHead, range, qf, row, o, sh);
    if (range.warpLast < 0)
      return;
    row.sum += __shfl_xor_sync(0xffffffffu, row.sum, 1);
    float *scratch = sh.scratch[warp];
    T *out = static_cast<T *>(p.out) + head * HEAD_DIM;
    const int firstRow = tile.firstToken + warp * kWarpRows;
    for (int d = 0; d < kDimTiles; ++d) {
      wmma::store_matrix_sync(scratch, o[d], kOutStride, wmma::mem_row_major);
      __syncwarp();
      if (row.position >= 0) {
        T *dst = out + (firstRow + lane / 2) * rowStride + d * 16 + (lane % 2) * 8;
        const float *src = scratch + (lane / 2) * kOutStride + (lane % 2) * 8;
#pragma unroll
        for (int c = 0; c < 8; ++c)
          dst[c] = fromFloat<T>(src[c] / row.sum);
      }
      __syncwarp();
    }
  }

  // The CTA's and this warp's key ranges from the rows' positions in shared memory; every
  // thread calls it (warp shuffles).
  static __device__ __forceinline__ KvRange kvRange(const Shared &sh, int window) {
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    KvRange range{0, -1, 0, -1};
    for (int r = 0; r < kRows; ++r)
      range.last = max(range.last, sh.positions[r]);
    const int mine = sh.positions[warp * kWarpRows + lane % kWarpRows];
    range.warpLast = warpMaxInt(mine);
    if (window > 0) { // padding rows (position -1) see nothing: they take no part in the minima
      range.first = range.last;
      for (int r = 0; r < kRows; ++r)
        if (sh.positions[r] >= 0)
          range.first = min(range.first, attentionWindowStart(sh.positions[r], window));
      range.warpFirst = warpMinInt(mine >= 0 ? attentionWindowStart(mine, window) : range.last + 1);
    }
    return range;
  }

  // Walks the KV tiles of `range`: every warp folds the tiles its rows see into row and o.
  template <bool WINDOWED>
  static __device__ __forceinline__ void
  walk(const AttentionParams &p, const int32_t *table, int kvHead, const KvRange &range,
       const FragQ (&qf)[kDimTiles], RowState &row, FragAcc (&o)[kDimTiles], Shared &sh) {
    const int lane = threadIdx.x % 32;
    float *scratch = sh.scratch[threadIdx.x / 32];
    // K/V tiles are double-buffered through registers: the next tile's loads are in flight
    // while the warps multiply the current one out of shared memory.
    KvStage stage;
    __syncthreads(); // every warp holds its Q fragments: the tiles may overwrite the staging
    stage.fetch(p, table, kvHead, range.first, min(kCols, range.last + 1 - range.first));
    stage.store(p, sh);
    __syncthreads();
    for (int kvStart = range.first; kvStart <= range.last; kvStart += kCols) {
      const int next = kvStart + kCols;
      if (next <= range.last)
        stage.fetch(p, table, kvHead, next, min(kCols, range.last + 1 - next));
      // A warp whose rows all mask this tile (or are padding) skips it.
      bool seen = range.warpLast >= kvStart;
      if constexpr (WINDOWED)
        seen = seen && range.warpFirst < next;
      if (seen) {
        scores(qf, sh, scratch);
        softmaxTile<WINDOWED>(p.scale, p.logitSoftcap, kvStart, lane, row, o, scratch);
        accumulate(sh, scratch, o);
      }
      if (next <= range.last) {
        __syncthreads(); // the current tile is consumed
        stage.store(p, sh);
        __syncthreads();
      }
    }
  }

  // S = Q K^T for the warp's 16 rows and the tile's kCols positions, unscaled, into scratch.
  static __device__ __forceinline__ void scores(const FragQ (&qf)[kDimTiles], const Shared &sh,
                                                float *scratch) {
#pragma unroll
    for (int c = 0; c < kColTiles; ++c) {
      FragAcc s;
      wmma::fill_fragment(s, 0.0f);
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        FragKt kt;
        wmma::load_matrix_sync(kt, &sh.kv[0][c * 16][d * 16], kKvStride);
        wmma::mma_sync(s, qf[d], kt, s);
      }
      wmma::store_matrix_sync(scratch + c * 16, s, kScoreStride, wmma::mem_row_major);
    }
    __syncwarp();
  }

  // Reads this lane's half row of scores, masks, updates the row's reference max (rescaling O
  // when it moves) and writes the probabilities over the scores as T.
  template <bool WINDOWED>
  static __device__ __forceinline__ void softmaxTile(float scale, float softcap, int kvStart,
                                                     int lane, RowState &row,
                                                     FragAcc (&o)[kDimTiles], float *scratch) {
    const int firstCol = (lane % 2) * kColsPerLane;
    float x[kColsPerLane];
    float tileMax = negativeInfinity();
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const int j = firstCol + i;
      bool visible = kvStart + j <= row.position;
      if constexpr (WINDOWED)
        visible = visible && kvStart + j >= row.firstKey;
      x[i] = visible ? softcapScore(scratch[(lane / 2) * kScoreStride + j] * scale, softcap)
                     : negativeInfinity();
      tileMax = fmaxf(tileMax, x[i]);
    }
    tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
    __syncwarp(); // every lane has its scores: the scratch is free
    // -inf + threshold is -inf, so a row's first visible tile always sets the reference.
    const bool moves = tileMax > row.refMax + kRescaleThreshold;
    const bool scaleO = moves && row.refMax != negativeInfinity();
    const float correction = scaleO ? expf(row.refMax - tileMax) : 1.0f;
    if (moves) {
      row.sum *= correction;
      row.refMax = tileMax;
    }
    if (__ballot_sync(0xffffffffu, scaleO) != 0)
      rescale(o, scratch, lane, correction);
    T *hi = reinterpret_cast<T *>(scratch) + (lane / 2) * kProbStride + firstCol;
    T *lo = hi + kWarpRows * kProbStride;
    const bool visible = row.refMax != negativeInfinity();
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const float prob = visible ? expf(x[i] - row.refMax) : 0.0f; // exp(-inf) = 0 when masked
      row.sum += prob;
      hi[i] = fromFloat<T>(prob);
      lo[i] = fromFloat<T>(prob - toFloat<T>(hi[i]));
    }
    __syncwarp();
  }

  // O[r][:] *= correction of row r, through the scratch one 16 x 16 tile at a time.
  static __device__ __forceinline__ void rescale(FragAcc (&o)[kDimTiles], float *scratch, int lane,
                                                 float correction) {
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      wmma::store_matrix_sync(scratch, o[d], kOutStride, wmma::mem_row_major);
      __syncwarp();
      float *values = scratch + (lane / 2) * kOutStride + (lane % 2) * 8;
#pragma unroll
      for (int c = 0; c < 8; ++c)
        values[c] *= correction;
      __syncwarp();
      wmma::load_matrix_sync(o[d], scratch, kOutStride, wmma::mem_row_major);
      __syncwarp();
    }
  }

  // O += (P_hi + P_lo) V over the tile's kCols positions.
  static __device__ __forceinline__ void accumulate(const Shared &sh, const float *scratch,
                                                    FragAcc (&o)[kDimTiles]) {
    const T *hi = reinterpret_cast<const T *>(scratch);
    const T *lo = hi + kWarpRows * kProbStride;
    FragQ pHi[kColTiles], pLo[kColTiles];
#pragma unroll
    for (int c = 0; c < kColTiles; ++c) {
      wmma::load_matrix_sync(pHi[c], hi + c * 16, kProbStride);
      wmma::load_matrix_sync(pLo[c], lo + c * 16, kProbStride);
    }
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d)
#pragma unroll
      for (int c = 0; c < kColTiles; ++c) {
        FragV v;
        wmma::load_matrix_sync(v, &sh.kv[1][c * 16][d * 16], kKvStride);
        wmma::mma_sync(o[d], pHi[c], v, o[d]);
        wmma::mma_sync(o[d], pLo[c], v, o[d]);
      }
  }

  static __device__ __forceinline__ int warpMaxInt(int v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
  }
  static __device__ __forceinline__ int warpMinInt(int v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
  }

  // Copies `rows` rows of HEAD_DIM elements (row r at src(r)) to dst rows of kKvStride elements,
  // zero-filling rows up to `capacity`.
  template <typename Source>
  static __device__ __forceinline__ void loadRows(T *dst, int capacity, int rows, Source src) {
    constexpr int kWide = static_cast<int>(16 / sizeof(T));
    constexpr int kVectorsPerRow = HEAD_DIM / kWide;
    for (int index = threadIdx.x; index < capacity * kVectorsPerRow; index += kThreads) {
      const int r = index / kVectorsPerRow;
      const int c = (index % kVectorsPerRow) * kWide;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < rows)
        value = *reinterpret_cast<const uint4 *>(src(r) + c);
      *reinterpret_cast<uint4 *>(dst + r * kKvStride + c) = value;
    }
  }

  // One K/V tile in registers: each thread's share of the tile's 16-byte vectors of the cache.
  struct KvStage {
    static constexpr int kWide = static_cast<int>(16 / sizeof(KV)); // cache elements a vector
    static_assert(HEAD_DIM % kWide == 0, "head dim must be a whole number of 16 bytes");
    static constexpr int kVectorsPerRow = HEAD_DIM / kWide;
    static constexpr int kTileVectors = kCols * kVectorsPerRow;
    static constexpr int kPerThread = (kTileVectors + kThreads - 1) / kThreads;
    uint4 k[kPerThread];
    uint4 v[kPerThread];

    // Issues the loads of positions [kvStart, kvStart + cols); rows past `cols` are zeros.
    __device__ __forceinline__ void fetch(const AttentionParams &p, const int32_t *table,
                                          int kvHead, int kvStart, int cols) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int index = threadIdx.x + i * kThreads;
        const int r = index / kVectorsPerRow;
        k[i] = v[i] = make_uint4(0, 0, 0, 0);
        if (index >= kTileVectors || r >= cols)
          continue;
        const int pos = kvStart + r;
        const int64_t offset =
            ((static_cast<int64_t>(table[pos / BLOCK_SIZE]) * NUM_KV_HEADS + kvHead) * BLOCK_SIZE +
             pos % BLOCK_SIZE) *
                HEAD_DIM +
            (index % kVectorsPerRow) * kWide;
        k[i] = *reinterpret_cast<const uint4 *>(static_cast<const KV *>(p.kCache) + offset);
        v[i] = *reinterpret_cast<const uint4 *>(static_cast<const KV *>(p.vCache) + offset);
      }
    }

    __device__ __forceinline__ void store(const AttentionParams &p, Shared &sh) const {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int index = threadIdx.x + i * kThreads;
        if (index >= kTileVectors)
          continue;
        const int r = index / kVectorsPerRow;
        const int c = (index % kVectorsPerRow) * kWide;
        if constexpr (IsSame<T, KV>::value) {
          *reinterpret_cast<uint4 *>(&sh.kv[0][r][c]) = k[i];
          *reinterpret_cast<uint4 *>(&sh.kv[1][r][c]) = v[i];
        } else { // each cache element widened (times an fp8 cache's scale), rounded once to T
          const KV *kIn = reinterpret_cast<const KV *>(&k[i]);
          const KV *vIn = reinterpret_cast<const KV *>(&v[i]);
#pragma unroll
          for (int e = 0; e < kWide; ++e) {
            sh.kv[0][r][c + e] = fromFloat<T>(kvToFloat<KV>(kIn[e], p.kScale));
            sh.kv[1][r][c + e] = fromFloat<T>(kvToFloat<KV>(vIn[e], p.vScale));
          }
        }
      }
    }
  };
};

} // namespace kiln::kernels::cuda
