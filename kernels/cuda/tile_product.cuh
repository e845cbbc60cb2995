// Tile products: one CTA of kTileThreads threads multiplies a tile of kTileRows input rows by NB
// tiles of kTileCols weight rows each (acc[b] = A B_b^T), K = KDIM deep, fp32 accumulators. The
// grouped MoE GEMMs (kernels/cuda/moe_grouped.cuh) and the quantized Linear's GEMM
// (kernels/cuda/quant.cuh gemmQuant) run on them; the caller finds its rows and weights and does
// its own epilogue from `acc`, laid out as the CUDA-core product's threads own it: thread
// (ty, tx) = (tid / 16, tid % 16) holds rows ty * 4 .. +4 and columns tx * 4 .. +4 of each tile.
//
// Two products:
//   tileProductFma  the CUDA cores in fp32: A and W widened exactly, quantized W decoded run by
//                   run into its exact fp32 values (quant.cuh QuantRun), so the sums are the cpu's
//                   products in another order;
//   tileProductTc   tensor cores (wmma 16x16x16) for A of a 16-bit type T: W of type T copied,
//                   quantized W decoded exactly and rounded once to T into shared memory (the
//                   values quant.cuh dequantWeights writes), so nothing but the tiles is ever
//                   dequantized.
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

// W run `k0 / kQuantRun` (columns k0 .. +32) of row `n` of tile `b`, decoded exactly to fp32.
template <int FORMAT, int GROUP, int KDIM, int NB>
__device__ __forceinline__ void decodeTileRun(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &w,
                                              int b, int n, int k0, float (&v)[kQuantRun]) {
  using Run = QuantRun<FORMAT, KDIM, GROUP>;
  const int64_t row = w.first[b] + n;
  const int run = k0 / kQuantRun;
  Run::decode(w.w, row, run, Run::load(w.w, row, run), v);
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
// Quantized: a thread decodes a whole run (one weight row's 32 columns) exactly, as the cpu does.
template <int FORMAT, int GROUP, int KDIM, int NB>
struct StageFmaWeights<QuantWeights<FORMAT, GROUP>, KDIM, NB> {
  static __device__ __forceinline__ void
  run(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &rows, int cols, int k0,
      FmaTileShared<NB> &sh) {
    for (int job = threadIdx.x; job < NB * kTileCols; job += kTileThreads) {
      const int b = job / kTileCols, n = job % kTileCols;
      float v[kQuantRun] = {};
      if (n < cols)
        decodeTileRun<FORMAT, GROUP, KDIM, NB>(rows, b, n, k0, v);
#pragma unroll
      for (int i = 0; i < kQuantRun; ++i)
        sh.b[b][i][n] = v[i];
    }
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
// their callers' epilogues. Its shared bytes: the input tiles, then (reusing them) the fp32
// output tiles.
template <typename T, int NB> struct TcTile {
  static constexpr int kDepth = kQuantRun;
  static constexpr int kLd = kDepth + 8;       // elements of T: rows stay 16-byte aligned
  static constexpr int kOutLd = kTileCols + 4; // floats
  static constexpr int kInBytes = (kTileRows + NB * kTileCols) * kLd * int(sizeof(T));
  static constexpr int kOutBytes = NB * kTileRows * kOutLd * int(sizeof(float));
  static constexpr int kBytes = kInBytes > kOutBytes ? kInBytes : kOutBytes;
};

// One thread's 8 elements of a T row into the tile (`src` null: past the rows; zeros past KDIM).
template <typename T, int KDIM, int N>
__device__ __forceinline__ void stageTcElements(T *dst, const T *src, int k0) {
  if (src && k0 + N <= KDIM && KDIM % N == 0) {
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src + k0);
    return;
  }
  const T zero = fromFloat<T>(0.0f);
#pragma unroll
  for (int i = 0; i < N; ++i)
    dst[i] = src && k0 + i < KDIM ? src[k0 + i] : zero;
}

// The W tiles' columns [k0, k0 + kDepth) in T: NB tiles of [kTileCols][kLd] (W rows, i.e. B
// column-major). Float W of type T: 8 elements a thread, copied.
template <typename T, typename W, int KDIM, int NB> struct StageTcWeights {
  static_assert(IsSame<T, W>::value, "tensor cores multiply x and W of one 16-bit type");
  static __device__ __forceinline__ void run(const TileWeights<W, NB> &rows, int cols, int k0,
                                             T *b) {
    constexpr int kLd = TcTile<T, NB>::kLd, kPerThread = 8;
    const int loadRow = threadIdx.x / 4, loadK = (threadIdx.x % 4) * kPerThread;
#pragma unroll
    for (int n = 0; n < NB; ++n)
      stageTcElements<T, KDIM, kPerThread>(
          b + (n * kTileCols + loadRow) * kLd + loadK,
          loadRow < cols ? rows.rows[n] + static_cast<int64_t>(loadRow) * KDIM : nullptr,
          k0 + loadK);
  }
};
// Quantized W: a thread decodes a whole run exactly and rounds each weight once to T.
template <typename T, int FORMAT, int GROUP, int KDIM, int NB>
struct StageTcWeights<T, QuantWeights<FORMAT, GROUP>, KDIM, NB> {
  static __device__ __forceinline__ void
  run(const TileWeights<QuantWeights<FORMAT, GROUP>, NB> &rows, int cols, int k0, T *b) {
    constexpr int kLd = TcTile<T, NB>::kLd;
    for (int job = threadIdx.x; job < NB * kTileCols; job += kTileThreads) {
      const int n = job % kTileCols;
      float v[kQuantRun] = {};
      if (n < cols)
        decodeTileRun<FORMAT, GROUP, KDIM, NB>(rows, job / kTileCols, n, k0, v);
      storeFloatsAligned<T, kQuantRun>(v, b + job * kLd);
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
  T *a = reinterpret_cast<T *>(shared);
  T *b = a + kTileRows * kLd;
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
  for (int k0 = 0; k0 < KDIM; k0 += kDepth) {
    stageTcElements<T, KDIM, kPerThread>(a + loadRow * kLd + loadK, aRow, k0 + loadK);
    StageTcWeights<T, W, KDIM, NB>::run(bRows, cols, k0, b);
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
          wmma::load_matrix_sync(fb, b + (n * kTileCols + warpCol + j * 16) * kLd + kk, kLd);
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
