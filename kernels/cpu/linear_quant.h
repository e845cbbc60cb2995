// Internal to kiln_cpu_kernels: Linear with quantized weights (runtime/base/quant_layout.h), which
// linear.cc runs whenever args.quant.groupSize > 0. linear_quant.cc splits the work over the
// worker pool and holds the portable dot products; linear_quant_avx512.cc the AVX-512 ones.
// embedding.cc dequantizes quantized table rows with dequantizeRow.
#pragma once

#include "kernels/cpu/kernels.h"
#include "runtime/base/quant_layout.h"

#include <cstdint>

namespace kiln::kernels::cpu {

// A quantized [rows, cols] matrix with its sections located.
struct QuantMatrix {
  QuantFormat format = QuantFormat::kQ8;
  int32_t groupSize = 0;
  int32_t cols = 0;
  int32_t groupsPerRow = 0;
  int64_t rowBytes = 0; // of one row's values: cols (Q8) or cols / 2 (Q4, Q4M)
  const uint8_t *values = nullptr;
  const uint16_t *scales = nullptr; // fp16, [rows, groupsPerRow]
  const uint16_t *mins = nullptr;   // fp16, as scales; Q4M only, else null
};
QuantMatrix quantMatrixOf(const void *data, QuantWeight quant, int64_t rows, int32_t cols);

// dst[0..cols) = the fp32 weights of row `row`, each exact as the layout defines it (Q4M: scale *
// u is exact in fp32, so scale * u + min is rounded once, as a fused multiply-add would).
void dequantizeRow(const QuantMatrix &w, int64_t row, float *dst);

// As linear(), for args.quant.groupSize > 0 (args.weightType and args.packedWeight not read).
void linearQuant(const LinearArgs &args);

namespace linear_quant {

// Rows x outputs of one task; weight rows are read once per task, x rows from cache.
constexpr int32_t kRowTile = 64;
constexpr int32_t kOutTile = 16;
// Tiles of at most this many rows read the packed weights directly (all rows at once); larger ones
// dequantize the tile's weight rows once into scratch first (the same values, so the same sums).
constexpr int32_t kDirectRows = 8;

// Rows [0, rows) of fp32 x (xStride floats apart) against weight rows [out0, out0 + outs).
struct DotTile {
  const float *x;
  int64_t xStride;
  int32_t rows; // at most kRowTile
  int32_t out0;
  int32_t outs; // at most kOutTile
};

// sums[r * kOutTile + o] = the dot product of x row r with weight row out0 + o, each summed in the
// level's fixed order whatever the tile (linear_quant.cc: portable, linear_quant_avx512.cc).
// `weights` has room for kOutTile rows of fp32 weights.
using DotTileFn = void (*)(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights);
void dotTileAvx512(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights);
void dotTileAvx2(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights);

} // namespace linear_quant
} // namespace kiln::kernels::cpu
