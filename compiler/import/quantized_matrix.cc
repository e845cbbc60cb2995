#include "compiler/import/quantized_matrix.h"

#include "runtime/base/fp8.h"
#include "runtime/base/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::compiler {
namespace {

// The nibble of value c (column within the row) of a 4-bit row.
uint8_t nibbleAt(const uint8_t *row, int64_t c) {
  const int64_t run = c / kQuantSubBlock, within = c % kQuantSubBlock;
  const uint8_t byte = row[run * 16 + within % 16];
  return within < 16 ? byte & 0x0F : byte >> 4;
}

void setNibble(uint8_t *row, int64_t c, uint8_t u) {
  const int64_t run = c / kQuantSubBlock, within = c % kQuantSubBlock;
  uint8_t &byte = row[run * 16 + within % 16];
  byte = within < 16 ? static_cast<uint8_t>((byte & 0xF0) | u)
                     : static_cast<uint8_t>((byte & 0x0F) | (u << 4));
}

float absMax(const float *w, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    amax = std::max(amax, std::fabs(w[i]));
  return amax;
}

// Stores `scale` as the group's scale and returns the value stored (what the weights use).
float storeScale(QuantizedMatrix &m, size_t index, float scale) {
  if (m.format == QuantFormat::kQ8FloatF32)
    return m.wideScales[index] = scale;
  m.scales[index] = f32ToF16(scale);
  return f16ToF32(m.scales[index]);
}

// One group of `n` values into row `r`'s group `g`.
void quantizeGroup(const float *w, int64_t n, int64_t r, int64_t g, QuantizedMatrix &m) {
  const size_t scaleIndex = static_cast<size_t>(r * m.groupsPerRow() + g);
  uint8_t *row = m.values.data() + r * m.rowValueBytes();
  const int64_t c0 = g * m.groupSize;
  if (isFp8Quant(m.format)) {
    const float s = storeScale(m, scaleIndex, absMax(w, n) / 448.0f);
    for (int64_t i = 0; i < n; ++i) // w / s beyond 448 (the scale rounded down) saturates
      row[c0 + i] = s == 0.0f ? 0 : f32ToF8E4M3(w[i] / s);
    return;
  }
  if (m.format == QuantFormat::kQ8) {
    const float s = storeScale(m, scaleIndex, absMax(w, n) / 127.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float q = s == 0.0f ? 0.0f : std::clamp(std::nearbyint(w[i] / s), -127.0f, 127.0f);
      row[c0 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
    return;
  }
  if (m.format == QuantFormat::kQ4) {
    float extreme = 0.0f;
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(w[i]) > std::fabs(extreme))
        extreme = w[i];
    const float s = storeScale(m, scaleIndex, extreme / -8.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float u = s == 0.0f ? 8.0f : std::clamp(std::floor(w[i] / s + 8.5f), 0.0f, 15.0f);
      setNibble(row, c0 + i, static_cast<uint8_t>(u));
    }
    return;
  }
  float lo = w[0], hi = w[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  if (m.format == QuantFormat::kQ4Zero) {
    lo = std::min(lo, 0.0f);
    hi = std::max(hi, 0.0f);
    const float s = storeScale(m, scaleIndex, (hi - lo) / 15.0f);
    const float zero = s == 0.0f ? 0.0f : std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f);
    m.mins[scaleIndex] = static_cast<uint16_t>(zero);
    for (int64_t i = 0; i < n; ++i) {
      const float u = s == 0.0f ? 0.0f : std::clamp(std::nearbyint(w[i] / s) + zero, 0.0f, 15.0f);
      setNibble(row, c0 + i, static_cast<uint8_t>(u));
    }
    return;
  }
  const float s = storeScale(m, scaleIndex, (hi - lo) / 15.0f);
  m.mins[scaleIndex] = f32ToF16(lo);
  const float min = f16ToF32(m.mins[scaleIndex]);
  for (int64_t i = 0; i < n; ++i) {
    const float u = s == 0.0f ? 0.0f : std::clamp(std::nearbyint((w[i] - min) / s), 0.0f, 15.0f);
    setNibble(row, c0 + i, static_cast<uint8_t>(u));
  }
}

} // namespace

float QuantizedMatrix::scaleAt(size_t slot) const {
  return format == QuantFormat::kQ8FloatF32 ? wideScales[slot] : f16ToF32(scales[slot]);
}

std::vector<uint8_t> QuantizedMatrix::bytes() const {
  const QuantLayout layout = quantLayout(format, rows, cols, groupSize);
  std::vector<uint8_t> out(layout.totalBytes, 0);
  std::memcpy(out.data(), values.data(), values.size());
  if (format == QuantFormat::kQ8FloatF32)
    std::memcpy(out.data() + layout.scalesOffset, wideScales.data(), wideScales.size() * 4);
  else
    std::memcpy(out.data() + layout.scalesOffset, scales.data(), scales.size() * 2);
  if (hasQuantMins(format))
    std::memcpy(out.data() + layout.minsOffset, mins.data(), mins.size() * 2);
  return out;
}

QuantizedMatrix zeroQuantizedMatrix(QuantFormat format, int64_t groupSize, int64_t rows,
                                    int64_t cols) {
  QuantizedMatrix m{format, groupSize, rows, cols, {}, {}, {}, {}};
  m.values.assign(static_cast<size_t>(rows * m.rowValueBytes()), 0);
  const size_t slots = static_cast<size_t>(rows * m.groupsPerRow());
  if (format == QuantFormat::kQ8FloatF32)
    m.wideScales.assign(slots, 0.0f);
  else
    m.scales.assign(slots, 0);
  if (hasQuantMins(format))
    m.mins.assign(slots, 0);
  return m;
}

QuantizedMatrix quantizeMatrix(const std::vector<float> &values, int64_t rows, int64_t cols,
                               QuantFormat format, int64_t groupSize) {
  QuantizedMatrix m = zeroQuantizedMatrix(format, groupSize, rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < m.groupsPerRow(); ++g)
      quantizeGroup(values.data() + r * cols + g * groupSize, groupSize, r, g, m);
  return m;
}

Result<QuantizedMatrix> sliceQuantizedMatrix(const QuantizedMatrix &m, int64_t rowBegin,
                                             int64_t rowEnd, int64_t colBegin, int64_t colEnd) {
  // One scale per row stays one per row of any slice that keeps whole 32-column runs.
  const bool perRow = m.groupSize == m.cols;
  const int64_t unit = perRow ? kQuantSubBlock : m.groupSize;
  if (rowBegin < 0 || rowEnd < rowBegin || colBegin < 0 || colEnd < colBegin || colEnd > m.cols ||
      colBegin % unit != 0 || colEnd % unit != 0 || colEnd == colBegin)
    return invalidArgument("a slice of a quantized matrix [" + std::to_string(m.rows) + ", " +
                           std::to_string(m.cols) + "] must take whole groups of " +
                           std::to_string(m.groupSize) + " columns, got cols [" +
                           std::to_string(colBegin) + ", " + std::to_string(colEnd) + ")");
  QuantizedMatrix out = zeroQuantizedMatrix(m.format, perRow ? colEnd - colBegin : m.groupSize,
                                            rowEnd - rowBegin, colEnd - colBegin);
  const int64_t g0 = perRow ? 0 : colBegin / m.groupSize;
  for (int64_t r = rowBegin; r < std::min(rowEnd, m.rows); ++r) {
    const int64_t o = r - rowBegin;
    std::memcpy(out.values.data() + o * out.rowValueBytes(),
                m.values.data() + r * m.rowValueBytes() + quantValueBytes(m.format, colBegin),
                static_cast<size_t>(out.rowValueBytes()));
    for (int64_t g = 0; g < out.groupsPerRow(); ++g) {
      const size_t to = o * out.groupsPerRow() + g, from = r * m.groupsPerRow() + g0 + g;
      if (m.format == QuantFormat::kQ8FloatF32)
        out.wideScales[to] = m.wideScales[from];
      else
        out.scales[to] = m.scales[from];
      if (hasQuantMins(m.format))
        out.mins[to] = m.mins[from];
    }
  }
  return out;
}

Status appendQuantizedRows(QuantizedMatrix &top, const QuantizedMatrix &bottom) {
  if (top.format != bottom.format || top.groupSize != bottom.groupSize || top.cols != bottom.cols)
    return invalidArgument("quantized matrices of different formats, groups or columns (" +
                           std::to_string(top.cols) + " vs " + std::to_string(bottom.cols) +
                           ") cannot be stacked");
  top.rows += bottom.rows;
  top.values.insert(top.values.end(), bottom.values.begin(), bottom.values.end());
  top.scales.insert(top.scales.end(), bottom.scales.begin(), bottom.scales.end());
  top.wideScales.insert(top.wideScales.end(), bottom.wideScales.begin(), bottom.wideScales.end());
  top.mins.insert(top.mins.end(), bottom.mins.begin(), bottom.mins.end());
  return okStatus();
}

float dequantizedWeight(const QuantizedMatrix &m, int64_t r, int64_t c) {
  const size_t group = static_cast<size_t>(r * m.groupsPerRow() + c / m.groupSize);
  const float s = m.scaleAt(group);
  const uint8_t *row = m.values.data() + r * m.rowValueBytes();
  switch (m.format) {
  case QuantFormat::kQ8:
    return s * static_cast<float>(static_cast<int8_t>(row[c]));
  case QuantFormat::kQ8Float:
  case QuantFormat::kQ8FloatF32:
    return s * f8e4m3ToF32(row[c]);
  case QuantFormat::kQ4:
    return s * static_cast<float>(nibbleAt(row, c) - 8);
  case QuantFormat::kQ4Min:
    break;
  case QuantFormat::kQ4Zero:
    return s * static_cast<float>(int(nibbleAt(row, c)) - int(m.mins[group]));
  }
  return s * static_cast<float>(nibbleAt(row, c)) + f16ToF32(m.mins[group]);
}

} // namespace kiln::compiler
