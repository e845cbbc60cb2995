// A quantized Linear of more rows than the GEMV takes (params.h GemmQuantParams), as tile
// products (kernels/cuda/tile_product.cuh): a CTA multiplies kTileRows rows of x by kTileCols W
// rows, decoding W's runs into shared memory as it goes, so no dequantized copy of W exists
// anywhere. x of a 16-bit type runs on tensor cores with each weight rounded once to it (the
// values dequant_weights writes for cuBLASLt, so both paths multiply the same weights); fp32 x on
// the CUDA cores with the exact weights. fp32 accumulation, the bias added in fp32, y rounded once.
#pragma once

#include "kiln/common.cuh"
#include "kiln/tile_product.cuh"

namespace kiln::kernels::cuda {

template <typename T, int IN, typename Y, int FORMAT, int GROUP, int THREADS> struct GemmQuant {
  static_assert(THREADS == kTileThreads, "the tile product's thread layout");
  static constexpr bool kTensorCores = !IsSame<T, float>::value;
  using Product = TileProduct<T, QuantWeights<FORMAT, GROUP>, IN, 1, kTensorCores>;

  static __device__ __forceinline__ void run(const GemmQuantParams &p) {
    __shared__ TileSharedBytes<Product::kSharedBytes> sh;
    __shared__ const T *aRows[kTileRows];
    const int row0 = blockIdx.x * kTileRows, n0 = blockIdx.y * kTileCols;
    waitForPriorGrids();
    if (row0 >= p.rows || n0 >= p.out)
      return;
    const T *x = static_cast<const T *>(p.x);
    for (int r = threadIdx.x; r < kTileRows; r += THREADS)
      aRows[r] = row0 + r < p.rows ? x + static_cast<int64_t>(row0 + r) * IN : nullptr;
    __syncthreads();
    const int64_t first[1] = {n0};
    float acc[1][4][4];
    Product::run(aRows, TileWeights<QuantWeights<FORMAT, GROUP>, 1>::at(nullptr, p.w, first, IN),
                 min(kTileCols, p.out - n0), sh.bytes, acc);
    Y *y = static_cast<Y *>(p.y);
    forEachTileOutput([&](int r, int c, int i, int j) {
      const int row = row0 + r, n = n0 + c;
      if (row < p.rows && n < p.out)
        y[static_cast<int64_t>(row) * p.out + n] =
            fromFloat<Y>(p.bias ? acc[0][i][j] + p.bias[n] : acc[0][i][j]);
    });
  }
};

} // namespace kiln::kernels::cuda
