// Tile products: one CTA of kTileThreads threads multiplies a tile of kTileRows input rows by NB
// tiles of kTileCols weight rows each (acc[b] = A B_b^T), K = KDIM deep, fp32 accumulators. The
// grouped MoE GEMMs (kernels/cuda/moe_grouped.cuh) and the quantized Linear's GEMM
// (kernels/cuda/quant.cuh gemmQuant) run on them; the caller finds its rows and weights and does
// its own epilogue from `acc`, laid out as the CUDA-core product's threads own it: thread
// (ty, tx) = (tid / 16, tid % 16) holds rows ty * 4 .. +4 and columns tx * 4 .. +4 of each tile.
//
// Two products:
//   tileProductFma  the CUDA cores in fp32: A and W widened exactly, quantized W decoded into
//                   its exact fp32 values (quant.cuh QuantRun, four threads a run of 32), so the
//                   sums are the cpu's products in another order;
//   tileProductTc   tensor cores (wmma 16x16x16) for A of a 16-bit type T: W of type T copied,
//                   quantized W decoded exactly and rounded once to T into shared memory (the
//                   values quant.cuh dequantWeights writes), so nothing but the tiles is ever
//                   dequantized; the next step's loads in flight during each step's multiplies.
// TileProduct picks one by its TENSOR_CORES argument; the caller says when (MoE: A and W of one
// 16-bit type; the quantized Linear: A of a 16-bit type).
#pragma once

#include <mma.h>

#include "kiln/common.cuh"
#include "kiln/quant.cuh"

namespace kiln::kernels::cuda {

// The weight type of a quantized W in a tile product (runtime/base/quant_layout.h; FORMAT one of
// params.h kQuantFormat*, GROUP columns a scale): what compiler/codegen/kernel_catalog.cc names
// for a weight_dtype "q<format>g<group>".
template <int FORMAT, int GROUP> struct QuantWeights {};

// The W rows of NB column tiles. Float W (W = float, __half or __nv_bfloat16): the first row of
// each tile. Quantized W (QuantWeights): the matrix's sections and each tile's first row in it.
template <typename W, int NB> struct TileWeights {
  const W *rows[NB];
  // Rows first[b] .. of the [*, kdim] matrix at `base` (`quant` unread).
  static __device__ __forceinline__ TileWeights at(const void *base, const QuantSections &,
                                                   const int64_t (&first)[NB], int kdim) {
    TileWeights out;
#pragma unroll
    for (int b = 0; b < NB; ++b)
      out.rows[b] = static_cast<const W *>(base) + first[b] * kdim;
    return out;
  }
};
template <int FORMAT, int GROUP, int NB> struct TileWeights<QuantWeights<FORMAT, GROUP>, NB> {
  QuantSections w;
  int64_t first[NB];
  static __device__ __forceinline__ TileWeights at(const void *, const QuantSections &quant,
                                                   const int64_t (&first)[NB], int) {
    TileWeights out;
    out.w = quant;
#pragma unroll
    for (int b = 0; b < NB; ++b)
      out.first[b] = first[b];
    return out;
  }
};

// The quantized W of one step (columns k0 .. +32: one run of each of the NB tiles' kTileCols rows)
// in quarters: four threads a run, each decoding 8 weights exactly (quant.cuh decodeQuarter);
// store(b, n, q, v) gets tile b's row n's weights [8 q, 8 q + 8) (zeros past `cols`).
template <int FORMAT, int GROUP, int KDIM, int NB, typename Store>
__device__ __forceinline__ void
decodeTileStep(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &w, int cols, int k0,
               Store store) {
  using Run = QuantRun<FORMAT, KDIM, GROUP>;
  for (int job = threadIdx.x; job < NB * kTileCols * 4; job += kTileThreads) {
    const int q = job % 4, n = (job / 4) % kTileCols, b = job / (4 * kTileCols);
    float v[Run::kQuarter] = {};
    if (n < cols)
      Run::decodeQuarter(Run::loadQuarter(w.w, w.first[b] + n, k0 / kQuantRun, q), v);
    store(b, n, q, v);
  }
}

// The CUDA-core product: steps of kDepth = one quantized run of 32 columns.
template <int NB> struct FmaTileShared {
  static constexpr int kDepth = kQuantRun;
  float a[kDepth][kTileRows + 4];
  float b[NB][kDepth][kTileCols + 4];
};

// sh.b = the weights of columns [k0, k0 + kDepth) of the NB tiles (zeros past `cols` and KDIM).
template <typename W, int KDIM, int NB> struct StageFmaWeights {
  static __device__ __forceinline__ void run(const TileWeights<W, NB> &rows, int cols, int k0,
                                             FmaTileShared<NB> &sh) {
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
// Quantized: each weight decoded exactly, as the cpu does, four threads a run.
template <int FORMAT, int GROUP, int KDIM, int NB>
struct StageFmaWeights<QuantWeights<FORMAT, GROUP>, KDIM, NB> {
  static __device__ __forceinline__ void
  run(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &rows, int cols, int k0,
      FmaTileShared<NB> &sh) {
    decodeTileStep<FORMAT, GROUP, KDIM, NB>(rows, cols, k0,
                                            [&](int b, int n, int q, const auto &v) {
#pragma unroll
                                              for (int i = 0; i < 8; ++i)
                                                sh.b[b][q * 8 + i][n] = v[i];
                                            });
  }
};

template <typename A, typename W, int KDIM, int NB>
__device__ __forceinline__ void tileProductFma(const A *const *aRows,
                                               const TileWeights<W, NB> &bRows, int cols,
                                               FmaTileShared<NB> &sh, float (&acc)[NB][4][4]) {
  constexpr int kDepth = FmaTileShared<NB>::kDepth;
  static_assert(kTileThreads * 8 == kTileRows * kDepth, "one load of 8 per thread");
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
    StageFmaWeights<W, KDIM, NB>::run(bRows, cols, k0, sh);
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

// The tensor-core product, for A of a 16-bit type T: kTileThreads threads = 8 warps, warp w
// owning rows (w / 2) * 16 .. +16 and columns (w % 2) * 32 .. +32 of each column tile; the
// accumulators go through shared memory to the CUDA-core layout of `acc`, so both products share
// their callers' epilogues. Two stages of input tiles in shared memory: each thread loads its part
// of step k + 1 from global memory into registers before the tensor cores take step k, and
// stores it into the other stage at the top of the next iteration, so the loads are in flight
// during the multiplies and one barrier a step suffices. Its shared bytes: the two stages, then
// (reusing them) the fp32 output tiles.
template <typename T, int NB> struct TcTile {
  static constexpr int kDepth = kQuantRun;
  static constexpr int kLd = kDepth + 8;       // elements of T: rows stay 16-byte aligned
  static constexpr int kOutLd = kTileCols + 4; // floats
  static constexpr int kStage = (kTileRows + NB * kTileCols) * kLd; // elements of T
  static constexpr int kInBytes = 2 * kStage * int(sizeof(T));
  static constexpr int kOutBytes = NB * kTileRows * kOutLd * int(sizeof(float));
  static constexpr int kBytes = kInBytes > kOutBytes ? kInBytes : kOutBytes;
};

// One thread's 8 elements of a T row from k0 on, as 16 bytes (`src` null: past the rows; zeros
// past KDIM).
template <typename T, int KDIM>
__device__ __forceinline__ uint4 loadTcElements(const T *src, int k0) {
  if (src && k0 + 8 <= KDIM && KDIM % 8 == 0)
    return *reinterpret_cast<const uint4 *>(src + k0);
  alignas(16) T v[8];
  const T zero = fromFloat<T>(0.0f);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    v[i] = src && k0 + i < KDIM ? src[k0 + i] : zero;
  return *reinterpret_cast<const uint4 *>(v);
}

// A thread's part of one step's W tiles (columns k0 .. +kDepth), loaded ahead into registers and
// then stored as NB tiles of [kTileCols][kLd] T (W rows, i.e. B column-major). Float W of type T:
// 8 elements of each tile, copied.
template <typename T, typename W, int KDIM, int NB> struct TcWeightsAhead {
  static_assert(IsSame<T, W>::value, "tensor cores multiply x and W of one 16-bit type");
  uint4 v[NB];
  __device__ __forceinline__ void load(const TileWeights<W, NB> &rows, int cols, int k0) {
    const int row = threadIdx.x / 4, k = k0 + (threadIdx.x % 4) * 8;
#pragma unroll
    for (int n = 0; n < NB; ++n)
      v[n] = loadTcElements<T, KDIM>(
          row < cols ? rows.rows[n] + static_cast<int64_t>(row) * KDIM : nullptr, k);
  }
  __device__ __forceinline__ void store(T *b) const {
    constexpr int kLd = TcTile<T, NB>::kLd;
    const int row = threadIdx.x / 4, k = (threadIdx.x % 4) * 8;
#pragma unroll
    for (int n = 0; n < NB; ++n)
      *reinterpret_cast<uint4 *>(b + (n * kTileCols + row) * kLd + k) = v[n];
  }
};
// Quantized W: the bytes and scales of NB quarter runs a thread (quant.cuh loadQuarter), decoded
// exactly and rounded once to T when stored.
template <typename T, int FORMAT, int GROUP, int KDIM, int NB>
struct TcWeightsAhead<T, QuantWeights<FORMAT, GROUP>, KDIM, NB> {
  using Run = QuantRun<FORMAT, KDIM, GROUP>;
  static constexpr int kJobs = NB * kTileCols * 4 / kTileThreads;
  static_assert(kJobs * kTileThreads == NB * kTileCols * 4, "whole quarter runs a thread");
  typename Run::Quarter quarter[kJobs];
  bool valid[kJobs];
  static __device__ __forceinline__ int jobOf(int u) { return threadIdx.x + u * kTileThreads; }
  __device__ __forceinline__ void load(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &rows,
                                       int cols, int k0) {
#pragma unroll
    for (int u = 0; u < kJobs; ++u) {
      const int job = jobOf(u), n = (job / 4) % kTileCols;
      valid[u] = n < cols;
      if (valid[u])
        quarter[u] = Run::loadQuarter(rows.w, rows.first[job / (4 * kTileCols)] + n, k0 / kQuantRun,
                                      job % 4);
    }
  }
  __device__ __forceinline__ void store(T *b) const {
    constexpr int kLd = TcTile<T, NB>::kLd;
#pragma unroll
    for (int u = 0; u < kJobs; ++u) {
      const int job = jobOf(u);
      float v[Run::kQuarter] = {};
      if (valid[u])
        Run::decodeQuarter(quarter[u], v);
      storeFloatsAligned<T, Run::kQuarter>(v, b + (job / 4) * kLd + (job % 4) * Run::kQuarter);
    }
  }
};

template <typename T, typename W, int KDIM, int NB>
__device__ __forceinline__ void tileProductTc(const T *const *aRows,
                                              const TileWeights<W, NB> &bRows, int cols,
                                              unsigned char *shared, float (&acc)[NB][4][4]) {
  namespace wmma = nvcuda::wmma;
  using Tile = TcTile<T, NB>;
  constexpr int kDepth = Tile::kDepth, kLd = Tile::kLd, kPerThread = 8;
  static_assert(kTileThreads * kPerThread == kTileRows * kDepth, "one load of 8 a thread");
  T *const stages = reinterpret_cast<T *>(shared);
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
  uint4 aAhead = loadTcElements<T, KDIM>(aRow, loadK);
  TcWeightsAhead<T, W, KDIM, NB> wAhead;
  wAhead.load(bRows, cols, 0);
  for (int k0 = 0, stage = 0; k0 < KDIM; k0 += kDepth, stage ^= 1) {
    T *a = stages + stage * Tile::kStage;
    T *b = a + kTileRows * kLd;
    *reinterpret_cast<uint4 *>(a + loadRow * kLd + loadK) = aAhead;
    wAhead.store(b);
    __syncthreads(); // the stage is whole; the other one no warp reads any more
    if (k0 + kDepth < KDIM) {
      aAhead = loadTcElements<T, KDIM>(aRow, k0 + kDepth + loadK);
      wAhead.load(bRows, cols, k0 + kDepth);
    }
#pragma unroll
    for (int kk = 0; kk < kDepth; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, a + warpRow * kLd + kk, kLd);
#pragma unroll
      for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fb, b + (n * kTileCols + warpCol + j * 16) * kLd + kk, kLd);
          wmma::mma_sync(c[n][j], fa, fb, c[n][j]);
        }
    }
  }
  __syncthreads(); // every warp is done with the stages before the outputs reuse their bytes
  float *out = reinterpret_cast<float *>(shared);
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(out + (n * kTileRows + warpRow) * Tile::kOutLd + warpCol + j * 16,
                              c[n][j], Tile::kOutLd, wmma::mem_row_major);
  __syncthreads();
  const int ty = tid / 16, tx = tid % 16;
#pragma unroll
  for (int n = 0; n < NB; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[n][i][j] = out[(n * kTileRows + ty * 4 + i) * Tile::kOutLd + tx * 4 + j];
}

// wmma loads and stores need 256-bit aligned shared addresses; 128 bytes covers them.
template <int N> struct alignas(128) TileSharedBytes { unsigned char bytes[N]; };

// acc = the tile product on tensor cores (TENSOR_CORES) or the CUDA cores.
template <typename T, typename W, int KDIM, int NB, bool TENSOR_CORES> struct TileProduct {
  static constexpr int kSharedBytes =
      TENSOR_CORES ? TcTile<T, NB>::kBytes : int(sizeof(FmaTileShared<NB>));
  static __device__ __forceinline__ void run(const T *const *aRows, const TileWeights<W, NB> &bRows,
                                             int cols, unsigned char *shared,
                                             float (&acc)[NB][4][4]) {
    if constexpr (TENSOR_CORES)
      tileProductTc<T, W, KDIM, NB>(aRows, bRows, cols, shared, acc);
    else
      tileProductFma<T, W, KDIM, NB>(aRows, bRows, cols,
                                     *reinterpret_cast<FmaTileShared<NB> *>(shared), acc);
  }
};

// Calls visit(r, n, i, j) for each of the thread's acc[.][i][j]: r its row in the tile (0 ..
// kTileRows), n its column (0 .. kTileCols).
template <typename Visit> __device__ __forceinline__ void forEachTileOutput(Visit visit) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      visit(ty * 4 + i, tx * 4 + j, i, j);
}

} // namespace kiln::kernels::cuda
