// MoeExperts (plan.fbs) as grouped GEMMs: the rows routed to each expert are gathered into one
// contiguous run of slots, and every expert's gate_up and down products run as tiles over its own
// slots, so each expert's weights are read once per row tile whatever the number of rows (prefill
// steps), and nothing of a layer has to fit in shared memory (Mixtral-8x7B's 14336-wide experts).
// Five kernels in order (params.h MoeGroupedParams gives the grids):
//   route:   one thread per row: its TOPK experts and weights (moe.cuh moeRouteRow);
//   place:   one CTA: counts the pairs of each expert, gives each pair a slot (each expert's slots
//            contiguous, in no particular order within the expert), and each expert its first
//            slot and first row tile;
//   gate_up: a CTA per (row tile, kMoeTileCols intermediate columns): gate and up of its slots,
//            act = silu(gate) * up;
//   down:    a CTA per (row tile, kMoeTileCols hidden columns): expertOut = act W_down^T;
//   combine: out[row] = sum over the row's pairs in increasing expert index of weight * expertOut.
// gate_up and down multiply on tensor cores (wmma 16x16x16, fp32 accumulators) when x and the
// experts are both fp16 or both bf16, else on the CUDA cores in fp32; quantized experts
// (QuantExperts) are decoded run by run into the CUDA cores' shared tiles, exact as on the cpu.
// A slot's products depend only on its own row (the tiles never mix rows), so the order of slots
// within an expert changes nothing and a row's result does not depend on the others. What
// kernels/cpu/moe.cc rounds to T (gate, up, act, the expert's output) this rounds too; the dot
// products run in another order, so results agree with it within fp32 rounding.
#pragma once

#include <mma.h>

#include "kiln/common.cuh"
#include "kiln/moe.cuh"
#include "kiln/quant.cuh"

namespace kiln::kernels::cuda {

template <typename T, int EXPERTS, int TOPK, int THREADS> struct MoeRoute {
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const int row = blockIdx.x * THREADS + threadIdx.x;
    if (row >= p.rows)
      return;
    moeRouteRow<T, EXPERTS, TOPK>(
        static_cast<const T *>(p.routerLogits) + static_cast<int64_t>(row) * EXPERTS, p.renormalize,
        p.pairExpert + row * TOPK, p.pairWeight + row * TOPK);
  }
};

template <int EXPERTS, int TOPK, int THREADS> struct MoePlace {
  static_assert(EXPERTS <= kMoeMaxExperts, "the place kernel counts in shared memory");
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    __shared__ int count[EXPERTS];
    __shared__ int start[EXPERTS + 1];
    const int pairs = p.rows * TOPK;
    for (int e = threadIdx.x; e < EXPERTS; e += THREADS)
      count[e] = 0;
    __syncthreads();
    // Each thread reads back only the pairs it wrote, so no fence is needed between the passes.
    for (int i = threadIdx.x; i < pairs; i += THREADS)
      p.pairSlot[i] = atomicAdd(&count[p.pairExpert[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
      int slots = 0, tiles = 0;
      for (int e = 0; e < EXPERTS; ++e) {
        start[e] = slots;
        p.expertStart[e] = slots;
        p.tileStart[e] = tiles;
        slots += count[e];
        tiles += (count[e] + kMoeTileRows - 1) / kMoeTileRows;
      }
      start[EXPERTS] = slots;
      p.expertStart[EXPERTS] = slots;
      p.tileStart[EXPERTS] = tiles;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < pairs; i += THREADS) {
      const int slot = start[p.pairExpert[i]] + p.pairSlot[i];
      p.pairSlot[i] = slot;
      p.slotRow[slot] = i / TOPK;
    }
  }
};

// The slots of one row tile: its expert and the slots [first, end).
struct MoeTile {
  int expert, first, end;
};

// Which expert row tile `tile` belongs to (false: past the last tile of this step).
template <int EXPERTS>
__device__ __forceinline__ bool moeFindTile(const MoeGroupedParams &p, int tile, MoeTile &out) {
  if (tile >= p.tileStart[EXPERTS])
    return false;
  int lo = 0, hi = EXPERTS - 1; // the last expert whose first tile is <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tileStart[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  out.expert = lo;
  out.first = p.expertStart[lo] + (tile - p.tileStart[lo]) * kMoeTileRows;
  out.end = min(out.first + kMoeTileRows, p.expertStart[lo + 1]);
  return true;
}

// The weights of one product's NB column tiles. Float experts (W = float, __half or
// __nv_bfloat16): the first row of each tile. Quantized experts (W = QuantExperts<FORMAT, GROUP>,
// runtime/base/quant_layout.h, read by kernels/cuda/quant.cuh QuantRun): the stacked matrix's
// sections and each tile's first row in it.
template <int FORMAT, int GROUP> struct QuantExperts {};

template <typename W, int NB> struct MoeWeightRows {
  const W *rows[NB];
  // Rows first[b] .. of the stacked [*, kdim] matrix at `base` (`quant` unread).
  static __device__ __forceinline__ MoeWeightRows at(const void *base, const QuantSections &,
                                                     const int64_t (&first)[NB], int kdim) {
    MoeWeightRows out;
#pragma unroll
    for (int b = 0; b < NB; ++b)
      out.rows[b] = static_cast<const W *>(base) + first[b] * kdim;
    return out;
  }
};
template <int FORMAT, int GROUP, int NB> struct MoeWeightRows<QuantExperts<FORMAT, GROUP>, NB> {
  QuantSections w;
  int64_t first[NB];
  static __device__ __forceinline__ MoeWeightRows at(const void *, const QuantSections &quant,
                                                     const int64_t (&first)[NB], int) {
    MoeWeightRows out;
    out.w = quant;
#pragma unroll
    for (int b = 0; b < NB; ++b)
      out.first[b] = first[b];
    return out;
  }
};

// A row tile times NB column tiles of weights, in fp32 on the CUDA cores: kMoeTileThreads threads,
// thread (ty, tx) = (tid / 16, tid % 16) owns rows ty * 4 .. +4 and columns tx * 4 .. +4 of each.
// `aRows` (shared) are the tile's kMoeTileRows input rows (null: past the expert's slots), `bRows`
// the tiles' weights (`cols` rows of them valid); both KDIM long. Steps of kDepth = one quantized
// run of 32 columns.
template <int NB> struct MoeTileShared {
  static constexpr int kDepth = kQuantRun;
  float a[kDepth][kMoeTileRows + 4];
  float b[NB][kDepth][kMoeTileCols + 4];
};

// sh.b = the weights of columns [k0, k0 + kDepth) of the NB tiles (zeros past `cols` and KDIM).
template <typename W, int KDIM, int NB> struct MoeStageWeights {
  static __device__ __forceinline__ void run(const MoeWeightRows<W, NB> &rows, int cols, int k0,
                                             MoeTileShared<NB> &sh) {
    const int n = threadIdx.x / 4, kk = (threadIdx.x % 4) * 8;
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int k = k0 + kk + i;
        sh.b[b][kk + i][n] = n < cols && k < KDIM
                                 ? toFloat<W>(rows.rows[b][static_cast<int64_t>(n) * KDIM + k])
                                 : 0.0f;
      }
  }
};
// Quantized: a thread decodes a whole run (one weight row's 32 columns) exactly, as the cpu does.
template <int FORMAT, int GROUP, int KDIM, int NB>
struct MoeStageWeights<QuantExperts<FORMAT, GROUP>, KDIM, NB> {
  static __device__ __forceinline__ void
  run(const MoeWeightRows<QuantExperts<FORMAT, GROUP>, NB> &rows, int cols, int k0,
      MoeTileShared<NB> &sh) {
    using Run = QuantRun<FORMAT, KDIM, GROUP>;
    for (int job = threadIdx.x; job < NB * kMoeTileCols; job += kMoeTileThreads) {
      const int b = job / kMoeTileCols, n = job % kMoeTileCols;
      float v[kQuantRun];
      if (n < cols) {
        const int64_t row = rows.first[b] + n;
        const int run = k0 / kQuantRun;
        Run::decode(rows.w, row, run, Run::load(rows.w, row, run), v);
      } else {
#pragma unroll
        for (int i = 0; i < kQuantRun; ++i)
          v[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kQuantRun; ++i)
        sh.b[b][i][n] = v[i];
    }
  }
};

template <typename A, typename W, int KDIM, int NB>
__device__ __forceinline__ void moeTileProduct(const A *const *aRows,
                                               const MoeWeightRows<W, NB> &bRows, int cols,
                                               MoeTileShared<NB> &sh, float (&acc)[NB][4][4]) {
  constexpr int kDepth = MoeTileShared<NB>::kDepth;
  static_assert(kMoeTileThreads * 8 == kMoeTileRows * kDepth, "one load of 8 per thread");
  const int tid = threadIdx.x;
  const int loadRow = tid / 4, loadK = (tid % 4) * 8;
  const int ty = tid / 16, tx = tid % 16;
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[b][i][j] = 0.0f;
  const A *aRow = aRows[loadRow];
  for (int k0 = 0; k0 < KDIM; k0 += kDepth) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = k0 + loadK + i;
      sh.a[loadK + i][loadRow] = aRow && k < KDIM ? toFloat<A>(aRow[k]) : 0.0f;
    }
    MoeStageWeights<W, KDIM, NB>::run(bRows, cols, k0, sh);
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kDepth; ++k) {
      float a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        a[i] = sh.a[k][ty * 4 + i];
#pragma unroll
      for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float w = sh.b[b][k][tx * 4 + j];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[b][i][j] = fmaf(a[i], w, acc[b][i][j]);
        }
    }
    __syncthreads();
  }
}

// The same product on tensor cores, for A and W of one 16-bit type: kMoeTileThreads threads = 8
// warps, warp w owning rows (w / 2) * 16 .. +16 and columns (w % 2) * 32 .. +32 of each column
// tile; the accumulators go through shared memory to the CUDA-core layout of `acc`, so both
// products share their epilogues. Its shared bytes: the input tiles, then (reusing them) the
// fp32 output tiles.
template <typename T, int NB> struct MoeTcTile {
  static constexpr int kDepth = 32;
  static constexpr int kLd = kDepth + 8;          // elements of T
  static constexpr int kOutLd = kMoeTileCols + 4; // floats
  static constexpr int kInBytes = (kMoeTileRows + NB * kMoeTileCols) * kLd * int(sizeof(T));
  static constexpr int kOutBytes = NB * kMoeTileRows * kOutLd * int(sizeof(float));
  static constexpr int kBytes = kInBytes > kOutBytes ? kInBytes : kOutBytes;
};

template <typename T, int KDIM, int NB>
__device__ __forceinline__ void moeTileProductTc(const T *const *aRows, const T *const (&bRows)[NB],
                                                 int cols, unsigned char *shared,
                                                 float (&acc)[NB][4][4]) {
  namespace wmma = nvcuda::wmma;
  using Tile = MoeTcTile<T, NB>;
  constexpr int kDepth = Tile::kDepth, kLd = Tile::kLd, kPerThread = 8;
  static_assert(kMoeTileThreads * kPerThread == kMoeTileRows * kDepth, "one load of 8 a thread");
  T *a = reinterpret_cast<T *>(shared);
  T *b = a + kMoeTileRows * kLd; // NB tiles of [kMoeTileCols][kLd]: W rows, i.e. B column-major
  const int tid = threadIdx.x, warp = tid / 32;
  const int loadRow = tid / 4, loadK = (tid % 4) * kPerThread;
  const int warpRow = (warp / 2) * 16, warpCol = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[NB][2];
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::fill_fragment(c[n][j], 0.0f);
  const T *aRow = aRows[loadRow];
  const T zero = fromFloat<T>(0.0f);
  auto stage = [&](T *dst, const T *src, int k0) {
    if (src && k0 + kPerThread <= KDIM && KDIM % kPerThread == 0) {
      *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src + k0);
    } else {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
        dst[i] = src && k0 + i < KDIM ? src[k0 + i] : zero;
    }
  };
  for (int k0 = 0; k0 < KDIM; k0 += kDepth) {
    stage(a + loadRow * kLd + loadK, aRow, k0 + loadK);
#pragma unroll
    for (int n = 0; n < NB; ++n)
      stage(b + (n * kMoeTileCols + loadRow) * kLd + loadK,
            loadRow < cols ? bRows[n] + static_cast<int64_t>(loadRow) * KDIM : nullptr, k0 + loadK);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, a + warpRow * kLd + kk, kLd);
#pragma unroll
      for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fb, b + (n * kMoeTileCols + warpCol + j * 16) * kLd + kk, kLd);
          wmma::mma_sync(c[n][j], fa, fb, c[n][j]);
        }
    }
    __syncthreads();
  }
  float *out = reinterpret_cast<float *>(shared); // the input tiles are done with
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(out + (n * kMoeTileRows + warpRow) * Tile::kOutLd + warpCol + j * 16,
                              c[n][j], Tile::kOutLd, wmma::mem_row_major);
  __syncthreads();
  const int ty = tid / 16, tx = tid % 16;
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[n][i][j] = out[(n * kMoeTileRows + ty * 4 + i) * Tile::kOutLd + tx * 4 + j];
}

// Tensor cores when x and W are one 16-bit type.
template <typename T, typename W> constexpr bool moeUsesTensorCores() {
  return IsSame<T, W>::value && !IsSame<T, float>::value;
}

// wmma loads and stores need 256-bit aligned shared addresses; 128 bytes covers them.
template <int N> struct alignas(128) MoeSharedBytes { unsigned char bytes[N]; };

// acc = the tile product on whichever unit moeUsesTensorCores picks.
template <typename T, typename W, int KDIM, int NB> struct MoeTileProduct {
  static constexpr bool kTensorCores = moeUsesTensorCores<T, W>();
  static constexpr int kSharedBytes =
      kTensorCores ? MoeTcTile<T, NB>::kBytes : int(sizeof(MoeTileShared<NB>));
  static __device__ __forceinline__ void run(const T *const *aRows,
                                             const MoeWeightRows<W, NB> &bRows, int cols,
                                             unsigned char *shared, float (&acc)[NB][4][4]) {
    if constexpr (kTensorCores)
      moeTileProductTc<T, KDIM, NB>(aRows, bRows.rows, cols, shared, acc);
    else
      moeTileProduct<T, W, KDIM, NB>(aRows, bRows, cols,
                                     *reinterpret_cast<MoeTileShared<NB> *>(shared), acc);
  }
};

template <typename T> __device__ __forceinline__ float moeRounded(float v) {
  return toFloat<T>(fromFloat<T>(v));
}

// Calls store(slot, n, i, j) for each of the thread's acc[.][i][j] inside the tile's slots and
// below `width` columns (thread layout of moeTileProduct).
template <typename Store>
__device__ __forceinline__ void moeForEachOutput(const MoeTile &tile, int n0, int width,
                                                 Store store) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int slot = tile.first + ty * 4 + i, n = n0 + tx * 4 + j;
      if (slot < tile.end && n < width)
        store(slot, n, i, j);
    }
}

// One grouped product: the CTA's row tile (blockIdx.x) and column tile (blockIdx.y) of
// A[slots] W_expert^T, A's rows from `aRow(slot)`, W's NB column tiles at `bRows(expert, n0)`,
// handed to `store` as moeForEachOutput does; nothing when the tile is past this step's.
template <typename T, typename W, int KDIM, int NB, int EXPERTS, int WIDTH, typename ARow,
          typename BRows, typename Store>
__device__ __forceinline__ void moeGroupedProduct(const MoeGroupedParams &p, ARow aRow, BRows bRows,
                                                  Store store) {
  using Product = MoeTileProduct<T, W, KDIM, NB>;
  __shared__ MoeSharedBytes<Product::kSharedBytes> sh;
  __shared__ const T *aRows[kMoeTileRows];
  MoeTile tile;
  if (!moeFindTile<EXPERTS>(p, blockIdx.x, tile))
    return;
  const int n0 = blockIdx.y * kMoeTileCols;
  for (int r = threadIdx.x; r < kMoeTileRows; r += kMoeTileThreads)
    aRows[r] = tile.first + r < tile.end ? aRow(tile.first + r) : nullptr;
  __syncthreads();
  float acc[NB][4][4];
  Product::run(aRows, bRows(tile.expert, n0), min(kMoeTileCols, WIDTH - n0), sh.bytes, acc);
  moeForEachOutput(tile, n0, WIDTH,
                   [&](int slot, int n, int i, int j) { store(slot, n, acc, i, j); });
}

// act[slot][n] = silu(gate) * up for the tile's slots and kMoeTileCols intermediate columns.
template <typename T, typename W, int HIDDEN, int INTER, int EXPERTS, int THREADS>
struct MoeGateUp {
  static_assert(THREADS == kMoeTileThreads, "the tile product's thread layout");
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const T *x = static_cast<const T *>(p.x);
    T *act = static_cast<T *>(p.act);
    moeGroupedProduct<T, W, HIDDEN, 2, EXPERTS, INTER>(
        p, [&](int slot) { return x + static_cast<int64_t>(p.slotRow[slot]) * HIDDEN; },
        [&](int expert, int n0) {
          const int64_t first[2] = {int64_t(expert) * 2 * INTER + n0,
                                    int64_t(expert) * 2 * INTER + INTER + n0};
          return MoeWeightRows<W, 2>::at(p.gateUp, p.gateUpQuant, first, HIDDEN);
        },
        [&](int slot, int n, const float(&acc)[2][4][4], int i, int j) {
          const float g = moeRounded<T>(acc[0][i][j]), u = moeRounded<T>(acc[1][i][j]);
          act[int64_t(slot) * INTER + n] = fromFloat<T>(g / (1.0f + expf(-g)) * u);
        });
  }
};

// expertOut[slot][n] = act[slot] . W_down[expert][n] for the tile's slots and kMoeTileCols hidden
// columns.
template <typename T, typename W, int HIDDEN, int INTER, int EXPERTS, int THREADS> struct MoeDown {
  static_assert(THREADS == kMoeTileThreads, "the tile product's thread layout");
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const T *act = static_cast<const T *>(p.act);
    T *out = static_cast<T *>(p.expertOut);
    moeGroupedProduct<T, W, INTER, 1, EXPERTS, HIDDEN>(
        p, [&](int slot) { return act + int64_t(slot) * INTER; },
        [&](int expert, int n0) {
          const int64_t first[1] = {int64_t(expert) * HIDDEN + n0};
          return MoeWeightRows<W, 1>::at(p.down, p.downQuant, first, INTER);
        },
        [&](int slot, int n, const float(&acc)[1][4][4], int i, int j) {
          out[int64_t(slot) * HIDDEN + n] = fromFloat<T>(acc[0][i][j]);
        });
  }
};

// out[row][h] = sum over the row's pairs (increasing expert index) of weight * expertOut[slot][h].
template <typename T, int HIDDEN, int TOPK, int THREADS> struct MoeCombine {
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const int row = blockIdx.x, h = blockIdx.y * THREADS + threadIdx.x;
    if (row >= p.rows || h >= HIDDEN)
      return;
    const T *expertOut = static_cast<const T *>(p.expertOut);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TOPK; ++k)
      sum += p.pairWeight[row * TOPK + k] *
             toFloat<T>(expertOut[int64_t(p.pairSlot[row * TOPK + k]) * HIDDEN + h]);
    static_cast<T *>(p.out)[int64_t(row) * HIDDEN + h] = fromFloat<T>(sum);
  }
};

} // namespace kiln::kernels::cuda
