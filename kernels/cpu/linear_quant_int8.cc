// The portable half of linear_quant_int8.h: its rule for quantizing rows, and its products on
// weights as stored (unpacked), one weight row widened to int16 at a time and read by every row of
// the tile. std::fma is the one rounding the rule names, so these give the avx2 panels' bits.
#include "kernels/cpu/linear_quant_int8.h"
#include "kernels/cpu/activation_mode.h"
#include "kernels/cpu/cpu_isa.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::kernels::cpu::linear_quant {

bool runsInt8Activations(QuantFormat format) {
  return activeCpuActivations() == CpuActivations::kInt8 && !isFp8Quant(format);
}

bool int8PanelsRunVnni() {
  return activeCpuIsa() >= CpuIsa::kAvx512 && cpuHasAvx512Vnni();
}

bool int8PanelsRunAmx() {
  return activeCpuIsa() >= CpuIsa::kAmx && cpuHasAmxInt8() && int8PanelsRunVnni();
}

void quantizeRowsPortable(const float *x, int64_t xStride, int32_t rows, const Int8Rows &out) {
  const int32_t blocks = out.cols / kInt8Block;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t b = 0; b < blocks; ++b) {
      const float *in = x + r * xStride + b * kInt8Block;
      int16_t *q = out.q + int64_t(r) * out.cols + b * kInt8Block;
      int8_t *bytes = out.bytes + int64_t(r) * out.cols + b * kInt8Block;
      float amax = 0.0f;
      bool finite = true;
      for (int32_t k = 0; k < kInt8Block; ++k) {
        finite = finite && std::isfinite(in[k]);
        amax = std::max(amax, std::fabs(in[k]));
      }
      const int32_t slot = r * blocks + b;
      int32_t sum = 0;
      if (!finite || amax == 0.0f) {
        for (int32_t k = 0; k < kInt8Block; ++k)
          q[k] = 0;
        out.scales[slot] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      } else {
        const float inverse = 127.0f / amax;
        for (int32_t k = 0; k < kInt8Block; ++k) {
          q[k] = static_cast<int16_t>(std::nearbyint(in[k] * inverse));
          sum += q[k];
        }
        out.scales[slot] = amax / 127.0f;
      }
      out.sums[slot] = sum;
      for (int32_t k = 0; k < kInt8Block; ++k)
        bytes[k] = static_cast<int8_t>(q[k]);
    }
}

namespace {

// The stored integers of weight row `row`: Q8 q, Q4 u - 8, Q4M / Q4Z u (runs of 32 columns in 16
// bytes, byte b holding column b low and b + 16 high).
void widenWeightRow(const QuantMatrix &w, int64_t row, int16_t *dst) {
  const uint8_t *values = w.values + row * w.rowBytes;
  if (isByteQuant(w.format)) {
    for (int32_t k = 0; k < w.cols; ++k)
      dst[k] = static_cast<int8_t>(values[k]);
    return;
  }
  const int16_t offset = w.format == QuantFormat::kQ4 ? 8 : 0;
  for (int32_t run = 0; run < w.cols; run += kQuantSubBlock, values += 16)
    for (int32_t b = 0; b < 16; ++b) {
      dst[run + b] = static_cast<int16_t>((values[b] & 0xF) - offset);
      dst[run + b + 16] = static_cast<int16_t>((values[b] >> 4) - offset);
    }
}

float rowDot(const QuantMatrix &w, int64_t row, const Int8Rows &x, int32_t r, const int16_t *wr) {
  const int32_t blocksPerGroup = w.groupSize / kInt8Block;
  const int32_t rowBlocks = x.cols / kInt8Block;
  const int16_t *q = x.q + int64_t(r) * x.cols;
  const float *d = x.scales + int64_t(r) * rowBlocks;
  const int32_t *qSums = x.sums + int64_t(r) * rowBlocks;
  float y = 0.0f;
  for (int32_t g = 0; g < w.groupsPerRow; ++g) {
    float part = 0.0f, xs = 0.0f;
    for (int32_t b = g * blocksPerGroup; b < (g + 1) * blocksPerGroup; ++b) {
      int32_t sum = 0;
      for (int32_t k = b * kInt8Block; k < (b + 1) * kInt8Block; ++k)
        sum += int32_t(q[k]) * int32_t(wr[k]);
      part = std::fma(static_cast<float>(sum), d[b], part);
      xs = std::fma(static_cast<float>(qSums[b]), d[b], xs);
    }
    const int64_t slot = row * w.groupsPerRow + g;
    const float scale = quantScale(w, slot);
    y = g == 0 ? part * scale : std::fma(part, scale, y);
    if (hasQuantMins(w.format))
      y = std::fma(xs, groupOffset(w, slot, scale), y);
  }
  return y;
}

} // namespace

void dotTileInt8Portable(const QuantMatrix &w, const Int8Rows &x, int32_t rows, int32_t out0,
                         int32_t outs, float *sums, int16_t *weightRow) {
  for (int32_t o = 0; o < outs; ++o) {
    widenWeightRow(w, out0 + o, weightRow);
    for (int32_t r = 0; r < rows; ++r)
      sums[r * kOutTile + o] = rowDot(w, out0 + o, x, r, weightRow);
  }
}

} // namespace kiln::kernels::cpu::linear_quant
