// MoeExperts (plan.fbs) as grouped GEMMs: the rows routed to each expert are gathered into one
// contiguous run of slots, and every expert's gate_up and down products run as tiles over its own
// slots, so each expert's weights are read once per row tile whatever the number of rows (prefill
// steps), and nothing of a layer has to fit in shared memory (Mixtral-8x7B's 14336-wide experts).
// Five kernels in order (params.h MoeGroupedParams gives the grids):
//   route:   one thread per row: its TOPK experts and weights (moe.cuh moeRouteRow);
//   place:   one CTA: counts the pairs of each expert, gives each pair a slot (each expert's slots
//            contiguous, in no particular order within the expert), and each expert its first
//            slot and first row tile;
//   gate_up: a CTA per (row tile, kTileCols intermediate columns): gate and up of its slots,
//            act = silu(gate) * up;
//   down:    a CTA per (row tile, kTileCols hidden columns): expertOut = act W_down^T;
//   combine: out[row] = sum over the row's pairs in increasing expert index of weight * expertOut.
// gate_up and down are tile products (kernels/cuda/tile_product.cuh): on tensor cores (wmma
// 16x16x16, fp32 accumulators) when x and the experts are both fp16 or both bf16, else on the
// CUDA cores in fp32; quantized experts (QuantWeights) are decoded into the CUDA cores' shared
// tiles, exact as on the cpu.
// A slot's products depend only on its own row (the tiles never mix rows), so the order of slots
// within an expert changes nothing and a row's result does not depend on the others. What
// kernels/cpu/moe.cc rounds to T (gate, up, act, the expert's output) this rounds too; the dot
// products run in another order, so results agree with it within fp32 rounding.
#pragma once

#include "kiln/common.cuh"
#include "kiln/moe.cuh"
#include "kiln/tile_product.cuh"

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
        tiles += (count[e] + kTileRows - 1) / kTileRows;
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
  out.first = p.expertStart[lo] + (tile - p.tileStart[lo]) * kTileRows;
  out.end = min(out.first + kTileRows, p.expertStart[lo + 1]);
  return true;
}

// Tensor cores when x and the experts are one 16-bit type (quantized experts: the CUDA cores,
// each weight exact in fp32).
template <typename T, typename W> constexpr bool moeUsesTensorCores() {
  return IsSame<T, W>::value && !IsSame<T, float>::value;
}

template <typename T> __device__ __forceinline__ float moeRounded(float v) {
  return toFloat<T>(fromFloat<T>(v));
}

// Calls store(slot, n, i, j) for each of the thread's acc[.][i][j] inside the tile's slots and
// below `width` columns (tile_product.cuh forEachTileOutput).
template <typename Store>
__device__ __forceinline__ void moeForEachOutput(const MoeTile &tile, int n0, int width,
                                                 Store store) {
  forEachTileOutput([&](int r, int c, int i, int j) {
    const int slot = tile.first + r, n = n0 + c;
    if (slot < tile.end && n < width)
      store(slot, n, i, j);
  });
}

// One grouped product: the CTA's row tile (blockIdx.x) and column tile (blockIdx.y) of
// A[slots] W_expert^T, A's rows from `aRow(slot)`, W's NB column tiles at `bRows(expert, n0)`,
// handed to `store` as moeForEachOutput does; nothing when the tile is past this step's.
template <typename T, typename W, int KDIM, int NB, int EXPERTS, int WIDTH, typename ARow,
          typename BRows, typename Store>
__device__ __forceinline__ void moeGroupedProduct(const MoeGroupedParams &p, ARow aRow, BRows bRows,
                                                  Store store) {
  using Product = TileProduct<T, W, KDIM, NB, moeUsesTensorCores<T, W>()>;
  __shared__ TileSharedBytes<Product::kSharedBytes> sh;
  __shared__ const T *aRows[kTileRows];
  MoeTile tile;
  if (!moeFindTile<EXPERTS>(p, blockIdx.x, tile))
    return;
  const int n0 = blockIdx.y * kTileCols;
  for (int r = threadIdx.x; r < kTileRows; r += kTileThreads)
    aRows[r] = tile.first + r < tile.end ? aRow(tile.first + r) : nullptr;
  __syncthreads();
  float acc[NB][4][4];
  Product::run(aRows, bRows(tile.expert, n0), min(kTileCols, WIDTH - n0), sh.bytes, acc);
  moeForEachOutput(tile, n0, WIDTH,
                   [&](int slot, int n, int i, int j) { store(slot, n, acc, i, j); });
}

// act[slot][n] = silu(gate) * up for the tile's slots and kTileCols intermediate columns.
template <typename T, typename W, int HIDDEN, int INTER, int EXPERTS, int THREADS>
struct MoeGateUp {
  static_assert(THREADS == kTileThreads, "the tile product's thread layout");
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const T *x = static_cast<const T *>(p.x);
    T *act = static_cast<T *>(p.act);
    moeGroupedProduct<T, W, HIDDEN, 2, EXPERTS, INTER>(
        p, [&](int slot) { return x + static_cast<int64_t>(p.slotRow[slot]) * HIDDEN; },
        [&](int expert, int n0) {
          const int64_t first[2] = {int64_t(expert) * 2 * INTER + n0,
                                    int64_t(expert) * 2 * INTER + INTER + n0};
          return TileWeights<W, 2>::at(p.gateUp, p.gateUpQuant, first, HIDDEN);
        },
        [&](int slot, int n, const float(&acc)[2][4][4], int i, int j) {
          const float g = moeRounded<T>(acc[0][i][j]), u = moeRounded<T>(acc[1][i][j]);
          act[int64_t(slot) * INTER + n] = fromFloat<T>(g / (1.0f + expf(-g)) * u);
        });
  }
};

// expertOut[slot][n] = act[slot] . W_down[expert][n] for the tile's slots and kTileCols hidden
// columns.
template <typename T, typename W, int HIDDEN, int INTER, int EXPERTS, int THREADS> struct MoeDown {
  static_assert(THREADS == kTileThreads, "the tile product's thread layout");
  static __device__ __forceinline__ void run(const MoeGroupedParams &p) {
    const T *act = static_cast<const T *>(p.act);
    T *out = static_cast<T *>(p.expertOut);
    moeGroupedProduct<T, W, INTER, 1, EXPERTS, HIDDEN>(
        p, [&](int slot) { return act + int64_t(slot) * INTER; },
        [&](int expert, int n0) {
          const int64_t first[1] = {int64_t(expert) * HIDDEN + n0};
          return TileWeights<W, 1>::at(p.down, p.downQuant, first, INTER);
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
