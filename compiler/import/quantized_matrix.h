// A weight matrix in one of the artifact's quantized formats (runtime/base/quant_layout.h), held
// as its three parts: what a checkpoint hands out when its tensors are stored that way (a GGUF
// file's Q8_0 / Q4_0 / Q4_1 blocks, compiler/import/gguf_checkpoint.h), or what round-to-nearest
// makes of fp32 values (`kiln compile --quantize`). Row and column slices (tensor parallelism,
// fused checkpoint tensors) and concatenation (fused linears) work on whole groups, and `bytes()`
// writes the artifact's layout. Plain C++ (no MLIR).
#pragma once

#include "runtime/base/quant_layout.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <vector>

namespace kiln::compiler {

struct QuantizedMatrix {
  QuantFormat format = QuantFormat::kQ8;
  int64_t groupSize = 0;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> values;  // rows x cols, row-major (4-bit: two per byte, as quant_layout.h)
  std::vector<uint16_t> scales; // rows x cols / groupSize, fp16 bits (empty for Q8F32)
  std::vector<float> wideScales; // Q8F32: its fp32 scales, shaped as scales; else empty
  std::vector<uint16_t> mins;    // Q4M fp16 mins, Q4Z integer zero points; as scales

  int64_t rowValueBytes() const { return static_cast<int64_t>(quantValueBytes(format, cols)); }
  int64_t groupsPerRow() const { return cols / groupSize; }
  // The scale of slot `slot` (row * groupsPerRow() + group) in fp32.
  float scaleAt(size_t slot) const;
  // The artifact's layout: sections aligned as quant_layout.h says, padding zero.
  std::vector<uint8_t> bytes() const;
};

// An all-zero matrix (zero scales: every weight is 0), the padding rows of a vocab shard.
QuantizedMatrix zeroQuantizedMatrix(QuantFormat format, int64_t groupSize, int64_t rows,
                                    int64_t cols);

// Round to nearest per group, from the group's largest magnitude(s), with the fp16 scale that is
// stored: Q8 s = amax / 127, q = round(w / s) in [-127, 127]; Q4 s = -m / 8 for m the value of
// largest magnitude (sign kept, as ggml's Q4_0), u = clamp(floor(w / s + 8.5), 0, 15); Q4M
// min = the group's minimum, s = (max - min) / 15, u = clamp(round((w - min) / s), 0, 15); Q4Z
// (GPTQ's asymmetric rounding) lo = min(w, 0), hi = max(w, 0), s = (hi - lo) / 15, zero =
// round(-lo / s), u = clamp(round(w / s) + zero, 0, 15); Q8F s = amax / 448, e = the fp8 E4M3
// nearest w / s (runtime/base/fp8.h, saturating); Q8F32 the same with s kept in fp32.
// `values` holds rows x cols fp32; the caller checked validQuantGroup.
QuantizedMatrix quantizeMatrix(const std::vector<float> &values, int64_t rows, int64_t cols,
                               QuantFormat format, int64_t groupSize);

// Rows [rowBegin, rowEnd) (rows past the matrix are zeros) x cols [colBegin, colEnd) of `m`;
// columns must fall on group boundaries, or, when a row is one group, on 32-column runs (the
// slice keeps each row's scale: its group is the slice's width).
Result<QuantizedMatrix> sliceQuantizedMatrix(const QuantizedMatrix &m, int64_t rowBegin,
                                             int64_t rowEnd, int64_t colBegin, int64_t colEnd);

// `bottom`'s rows appended below `top`'s (same format, group and columns).
Status appendQuantizedRows(QuantizedMatrix &top, const QuantizedMatrix &bottom);

// Weight (r, c) of `m` in fp32 (tests, and the compile's own checks).
float dequantizedWeight(const QuantizedMatrix &m, int64_t r, int64_t c);

} // namespace kiln::compiler
