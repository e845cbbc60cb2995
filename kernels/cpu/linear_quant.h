// Internal to kiln_cpu_kernels: Linear with quantized weights (runtime/base/quant_layout.h), which
// linear.cc runs whenever args.quant.groupSize > 0. linear_quant.cc splits the work over the
// worker pool, packs the panels and holds the portable dot products; linear_quant_avx2.cc the
// AVX2 ones (also what AVX-512 levels run on weights nobody packed), linear_quant_panels_avx512.cc
// the panels' micro-kernels. embedding.cc dequantizes quantized table rows with dequantizeRow.
#pragma once

#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"
#include "runtime/base/quant_layout.h"

#include <cstdint>
#include <cstring>

namespace kiln::kernels::cpu {

// A quantized [rows, cols] matrix with its sections located.
struct QuantMatrix {
  QuantFormat format = QuantFormat::kQ8;
  int32_t groupSize = 0;
  int32_t cols = 0;
  int32_t groupsPerRow = 0;
  int64_t rowBytes = 0; // of one row's values: cols (Q8, Q8F) or cols / 2 (4-bit)
  const uint8_t *values = nullptr;
  const void *scales = nullptr;     // fp16 (Q8F32: fp32), [rows, groupsPerRow]
  const uint16_t *mins = nullptr;   // as scales: Q4M fp16 mins, Q4Z integer zero points; else null
};

// The scale of slot `slot` (row * groupsPerRow + group) in fp32.
inline float quantScale(const QuantMatrix &w, int64_t slot) {
  if (w.format == QuantFormat::kQ8FloatF32) {
    float scale;
    std::memcpy(&scale, static_cast<const uint8_t *>(w.scales) + 4 * slot, 4);
    return scale;
  }
  return f16ToF32(static_cast<const uint16_t *>(w.scales)[slot]);
}

// What a group's stored 4-bit u is offset by, w = scale * u + offset, exact in fp32: Q4 -8 scale,
// Q4M the min, Q4Z -zero * scale (slot: row * groupsPerRow + group).
inline float groupOffset(const QuantMatrix &w, int64_t slot, float scale) {
  switch (w.format) {
  case QuantFormat::kQ4Min:
    return f16ToF32(w.mins[slot]);
  case QuantFormat::kQ4Zero:
    return -static_cast<float>(w.mins[slot]) * scale;
  default:
    return -8.0f * scale;
  }
}
QuantMatrix quantMatrixOf(const void *data, QuantWeight quant, int64_t rows, int32_t cols);

// dst[0..cols) = the fp32 weights of row `row`, each exact as the layout defines it (Q4M: scale *
// u is exact in fp32, so scale * u + min is rounded once, as a fused multiply-add would).
void dequantizeRow(const QuantMatrix &w, int64_t row, float *dst);

// As linear(), for args.quant.groupSize > 0 (args.weightType not read; args.packedWeight, the
// panels, read from avx512 up).
void linearQuant(const LinearArgs &args);
// linearPackedWeightBytes and packLinearWeights (kernels.h) for a quantized matrix: the panels.
size_t quantPackedWeightBytes(QuantWeight quant, int32_t outFeatures, int32_t inFeatures);
void packQuantWeights(const void *weight, QuantWeight quant, int32_t outFeatures,
                      int32_t inFeatures, void *packed);

namespace linear_quant {

// Rows x outputs of one task; weight rows are read once per task, x rows from cache.
constexpr int32_t kRowTile = 64;
constexpr int32_t kOutTile = 16;

// Rows [0, rows) of fp32 x (xStride floats apart) against weight rows [out0, out0 + outs).
struct DotTile {
  const float *x;
  int64_t xStride;
  int32_t rows; // at most kRowTile
  int32_t out0;
  int32_t outs; // at most kOutTile
};

// sums[r * kOutTile + o] = the dot product of x row r with weight row out0 + o, each summed in the
// level's fixed order whatever the tile (linear_quant.cc: portable, linear_quant_avx2.cc).
// `weights` has room for kOutTile rows of fp32 weights.
using DotTileFn = void (*)(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights);
void dotTileAvx2(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights);

// Panels (from avx512 up, and at avx2 where the CPU has F16C; packed when the op is prepared,
// kernels.h packLinearWeights): the
// matrix's outputs in panels of 16 (the last one padded with zero bytes, scales and mins), each
// panel its groups in order, each group
//   values  Q8 / Q8F: groupSize x 16 bytes, [column][output]; 4-bit: per run of 32 columns 16 x 16
//           bytes, [b][output], byte b of that run of the output's row as stored (low nibble
//           column b, high nibble column b + 16);
//   scales  the 16 outputs' fp16 scales of the group (Q8F32: fp32); mins (Q4M, Q4Z) fp16 or
//           zero points as uint16, after them.
// So a panel is one stream read front to back, and one 16-byte load gives 16 outputs' values.
constexpr int32_t kPanelOutputs = 16;
constexpr int32_t kMaxTaskPanels = 8; // panels of one task
constexpr int32_t kPanelSumStride = kMaxTaskPanels * kPanelOutputs;
struct PanelLayout {
  int32_t panels = 0, groups = 0;
  int64_t valueBytes = 0; // of one group of one panel
  int64_t groupBytes = 0; // values, scales (and mins)
  int64_t panelBytes = 0;
  size_t totalBytes = 0;
};
PanelLayout panelLayout(QuantWeight quant, int32_t outFeatures, int32_t inFeatures);
void packPanels(const QuantMatrix &w, int32_t outFeatures, void *packed);

// Rows [0, rows) of fp32 x against panels [0, panelCount) from `panels`: sums[r *
// kPanelSumStride + 16 * p + o] = row r's output o of panel p (linear_quant_panels_avx512.cc,
// linear_quant_panels_avx2.cc).
struct PanelTile {
  const uint8_t *panels;
  PanelLayout layout;
  QuantFormat format;
  int32_t groupSize;
  int32_t panelCount; // at most kMaxTaskPanels
  const float *x;
  int64_t xStride;
  int32_t rows;       // at most kRowTile
  const float *xSums; // Q4M, Q4Z: [rows][groups], groupSumsAvx512 of each row; else unread
  float *sums;
};
void panelTileAvx512(const PanelTile &tile);
// The same at the avx2 level on a CPU with F16C (linear_quant_panels_avx2.cc).
void panelTileAvx2(const PanelTile &tile);
// sums[g] = the sum of x over group g (groupSize columns each), in the panels' fixed order.
void groupSumsAvx512(const float *x, int32_t groupSize, int32_t groups, float *sums);
void groupSumsAvx2(const float *x, int32_t groupSize, int32_t groups, float *sums);

} // namespace linear_quant
} // namespace kiln::kernels::cpu
