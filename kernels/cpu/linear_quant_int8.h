// Internal to kiln_cpu_kernels: Linear with integer weights on int8-quantized rows, which
// linear_quant.cc runs instead of its fp32 products when activeCpuActivations() is kInt8
// (activation_mode.h) and the weights are Q8, Q4, Q4M or Q4Z (fp8 formats keep fp32 rows).
//
// The rows. Each x row is cut into blocks of 32 columns. For a block with amax = max |x_k|:
//   amax 0:                 d = 0 and every q_k = 0;
//   amax NaN or infinite:   d = NaN and every q_k = 0 (the outputs come out NaN, as with fp32
//   rows); else:                   d = amax / 127 and q_k = round-to-nearest-even(x_k * (127 /
//   amax)),
// each division and product rounded once in fp32, so |q_k| <= 127 and x_k ~ d * q_k.
//
// The products. For a row and an output, with s the weight group's scale and w_k the stored
// integer (Q8 q; Q4 u - 8; Q4M and Q4Z u), per group g of the row in order:
//   part = 0; for each block b of g in order: part = fma(float(sum_k q_k * w_k), d_b, part)
//   y = g == 0 ? part * s : fma(part, s, y)
//   Q4M / Q4Z also: xs = 0; for each block b: xs = fma(float(sum_k q_k), d_b, xs);
//                   y = fma(xs, offset, y), offset the min (Q4M) or -zero * s (Q4Z).
// The integer sums are exact (|sum| <= 32 * 127 * 128 < 2^24, so float() is exact too), so every
// level and tile shape gives the same bits: the avx2 panels (linear_quant_int8_avx2.cc, also run
// from avx512 up on CPUs without VNNI), the VNNI panels (linear_quant_int8_vnni.cc), the AMX
// tiles (linear_quant_int8_amx.cc, rows in groups of 16) and the portable rows
// (linear_quant_int8.cc, weights nobody packed and levels without panels). This is y = W^ x^
// with x^ = d * q, up to fp32 rounding of the sums.
#pragma once

#include "kernels/cpu/linear_quant.h"

#include <cstdint>

namespace kiln::kernels::cpu::linear_quant {

constexpr int32_t kInt8Block = 32;

// Rows of x quantized by the rule above: q as int16 (the products' operand width), d and the sum
// of q per block.
struct Int8Rows {
  int16_t *q = nullptr;    // [rows][cols]
  int8_t *bytes = nullptr; // [rows][cols]: the same q as bytes (the 4-bit panels' operand)
  float *scales = nullptr; // [rows][cols / 32]
  int32_t *sums = nullptr; // [rows][cols / 32]
  int32_t cols = 0;        // a multiple of 32
};

// Whether a Linear with weights of `format` runs on int8 rows now.
bool runsInt8Activations(QuantFormat format);

// Quantizes rows [0, rows) of x (xStride floats apart) into `out` (same bytes at every level).
void quantizeRowsPortable(const float *x, int64_t xStride, int32_t rows, const Int8Rows &out);
void quantizeRowsAvx2(const float *x, int64_t xStride, int32_t rows, const Int8Rows &out);

// As PanelTile (linear_quant.h) on quantized rows: sums[r * kPanelSumStride + 16 * p + o].
struct Int8PanelTile {
  const uint8_t *panels;
  PanelLayout layout;
  QuantFormat format;
  int32_t groupSize;
  int32_t panelCount; // at most kMaxTaskPanels
  Int8Rows x;
  int32_t rows; // at most kRowTile
  float *sums;
  // The same panels as this thread's previous tile of the same Linear call: the AMX tiles keep
  // what they built from them.
  bool panelsAsBefore = false;
};
void panelTileInt8Avx2(const Int8PanelTile &tile);
// The same bits with AVX-512 VNNI (linear_quant_int8_vnni.cc), where int8PanelsRunVnni().
void panelTileInt8Vnni(const Int8PanelTile &tile);
// Whether the active level runs int8 panels on VNNI: from avx512 up where cpuHasAvx512Vnni().
bool int8PanelsRunVnni();
// The same bits on AMX-INT8 tiles for the tile's whole groups of 16 rows, the rest on VNNI
// (linear_quant_int8_amx.cc), where int8PanelsRunAmx().
void panelTileInt8Amx(const Int8PanelTile &tile);
// Whether the active level runs int8 panels on AMX: at amx where cpuHasAmxInt8() and
// int8PanelsRunVnni().
bool int8PanelsRunAmx();

// Rows [0, rows) of `x` against weight rows [out0, out0 + outs) of w, unpacked:
// sums[r * kOutTile + o]. `weightRow` has room for w.cols int16.
void dotTileInt8Portable(const QuantMatrix &w, const Int8Rows &x, int32_t rows, int32_t out0,
                         int32_t outs, float *sums, int16_t *weightRow);

} // namespace kiln::kernels::cpu::linear_quant
