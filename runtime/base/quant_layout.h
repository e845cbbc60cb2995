// The byte layout of a quantized weight matrix [rows, cols] (schema/plan.fbs DType Q8, Q4, Q4M,
// Q4Z, Q8F, Q8F32): one tensor in the weights file, three sections, each starting on a 64-byte
// boundary of it:
//   values  rows x cols, row-major. Q8: one int8 per value; Q8F, Q8F32 one fp8 E4M3 per value.
//           Q4 / Q4M /
//   Q4Z: 4-bit values, two per byte;
//           in each run of 32 values of a row, byte b (0..15) holds value b in its low nibble and
//           value b + 16 in its high nibble (the order of GGUF's Q4_0 / Q4_1 blocks, so that a
//           mask and a shift give 16 consecutive values each).
//   scales  rows x (cols / groupSize) fp16 (Q8F32: fp32), row-major: group g of a row is its
//           columns [g * groupSize, (g + 1) * groupSize).
//   mins    Q4M: fp16 mins; Q4Z: integer zero points (0..15) as uint16; shaped as scales. Absent
//           for Q8 and Q4.
// A value's weight: Q8 scale * q (q signed); Q4 scale * (u - 8) (u the nibble, 0..15); Q4M
// scale * u + min; Q8F scale * e (e an fp8 E4M3 value, runtime/base/fp8.h; exact in fp32: 4 and
// 11 significant bits); Q8F32 the same with an fp32 scale, rounded once in fp32 (fp8 checkpoints'
// fp32 block scales kept as stored, compiler/import/hf_fp8_checkpoint.h); Q4Z scale * (u - zero)
// (GPTQ's and AWQ's form; exact in fp32; a zero weight is +0, as scale * u - zero * scale gives
// it). groupSize is a positive multiple of 32 that divides cols (cols itself: one scale per row,
// "per channel"). Header-only, no dependencies: the compiler writes this layout, the artifact
// checks and the kernels read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class QuantFormat : uint8_t { kQ8, kQ4, kQ4Min, kQ4Zero, kQ8Float, kQ8FloatF32 };

// Whether the format's values are fp8 E4M3 (Q8F, Q8F32).
inline constexpr bool isFp8Quant(QuantFormat format) {
  return format == QuantFormat::kQ8Float || format == QuantFormat::kQ8FloatF32;
}

// Whether the format stores one byte a value (Q8, Q8F, Q8F32) rather than two 4-bit values a byte.
inline constexpr bool isByteQuant(QuantFormat format) {
  return format == QuantFormat::kQ8 || isFp8Quant(format);
}

// Bytes of one scale: fp16, or fp32 for Q8F32. Mins and zero points are 2 bytes.
inline constexpr uint64_t quantScaleBytes(QuantFormat format) {
  return format == QuantFormat::kQ8FloatF32 ? 4 : 2;
}

// Whether the format stores a third section (mins or zero points) shaped as the scales.
inline constexpr bool hasQuantMins(QuantFormat format) {
  return format == QuantFormat::kQ4Min || format == QuantFormat::kQ4Zero;
}

inline constexpr int64_t kQuantSubBlock = 32; // values per nibble-split run; groups are multiples
inline constexpr uint64_t kQuantSectionAlign = 64;

struct QuantLayout {
  int64_t groupsPerRow = 0;
  uint64_t valuesBytes = 0;
  uint64_t scalesOffset = 0; // from the tensor's first byte
  uint64_t minsOffset = 0;   // Q4M, Q4Z; 0 otherwise
  uint64_t totalBytes = 0;
};

inline uint64_t alignQuantSection(uint64_t bytes) {
  return (bytes + kQuantSectionAlign - 1) / kQuantSectionAlign * kQuantSectionAlign;
}

// Whether groupSize suits a matrix of `cols` columns (see above).
inline bool validQuantGroup(int64_t cols, int64_t groupSize) {
  return groupSize > 0 && groupSize % kQuantSubBlock == 0 && cols > 0 && cols % groupSize == 0;
}

// Bytes of `values` values: one each (Q8), or two to a byte (Q4, Q4M, Q4Z; `values` even).
inline uint64_t quantValueBytes(QuantFormat format, uint64_t values) {
  return isByteQuant(format) ? values : values / 2;
}

// The layout of a [rows, cols] matrix; callers check validQuantGroup first.
inline QuantLayout quantLayout(QuantFormat format, int64_t rows, int64_t cols, int64_t groupSize) {
  QuantLayout layout;
  layout.groupsPerRow = cols / groupSize;
  const uint64_t values = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  layout.valuesBytes = quantValueBytes(format, values);
  const uint64_t slots = static_cast<uint64_t>(rows) * layout.groupsPerRow;
  layout.scalesOffset = alignQuantSection(layout.valuesBytes);
  layout.totalBytes = layout.scalesOffset + slots * quantScaleBytes(format);
  if (hasQuantMins(format)) {
    layout.minsOffset = alignQuantSection(layout.totalBytes);
    layout.totalBytes = layout.minsOffset + slots * 2;
  }
  return layout;
}

inline const char *quantFormatName(QuantFormat format) {
  switch (format) {
  case QuantFormat::kQ8:
    return "Q8";
  case QuantFormat::kQ4:
    return "Q4";
  case QuantFormat::kQ4Min:
    return "Q4M";
  case QuantFormat::kQ8Float:
    return "Q8F";
  case QuantFormat::kQ8FloatF32:
    return "Q8F32";
  case QuantFormat::kQ4Zero:
    break;
  }
  return "Q4Z";
}

// "Q8" -> kQ8, ...; nullopt for any other text.
inline std::optional<QuantFormat> parseQuantFormat(std::string_view name) {
  for (QuantFormat format : {QuantFormat::kQ8, QuantFormat::kQ4, QuantFormat::kQ4Min,
                             QuantFormat::kQ4Zero, QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32})
    if (name == quantFormatName(format))
      return format;
  return std::nullopt;
}

} // namespace kiln
