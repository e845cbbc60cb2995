#include "compiler/import/gguf_packed.h"

#include "compiler/import/gguf_file.h"

#include <cstring>

namespace kiln::compiler {
namespace {

constexpr int64_t kBlock = 32; // values per Q8_0 / Q4_0 / Q4_1 block

struct BlockShape {
  QuantFormat format;
  int64_t bytes;    // per block
  int64_t valuesAt; // offset of the values in a block
  bool hasMin;
};

std::optional<BlockShape> blockShape(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
  case GgmlType::kQ8_0: // fp16 d; 32 int8
    return BlockShape{QuantFormat::kQ8, 34, 2, false};
  case GgmlType::kQ4_0: // fp16 d; 16 bytes of nibbles (low: values 0-15, high: 16-31)
    return BlockShape{QuantFormat::kQ4, 18, 2, false};
  case GgmlType::kQ4_1: // fp16 d, fp16 m; 16 bytes of nibbles
    return BlockShape{QuantFormat::kQ4Min, 20, 4, true};
  default:
    return std::nullopt;
  }
}

} // namespace

std::optional<TensorInfo::Packed> ggmlPackedForm(uint32_t type, int64_t cols) {
  std::optional<BlockShape> shape = blockShape(type);
  if (!shape || cols <= 0 || cols % kBlock != 0)
    return std::nullopt;
  return TensorInfo::Packed{shape->format, kBlock};
}

QuantizedMatrix unpackGgmlBlocks(uint32_t type, std::span<const uint8_t> bytes, int64_t rows,
                                 int64_t cols, const std::function<int64_t(int64_t)> &storedRow) {
  const BlockShape shape = *blockShape(type);
  QuantizedMatrix m = zeroQuantizedMatrix(shape.format, kBlock, rows, cols);
  const int64_t blocksPerRow = cols / kBlock;
  const int64_t valueBytes = m.rowValueBytes() / blocksPerRow; // 32 or 16
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *row = bytes.data() + storedRow(r) * blocksPerRow * shape.bytes;
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      const uint8_t *block = row + b * shape.bytes;
      const size_t group = static_cast<size_t>(r * blocksPerRow + b);
      std::memcpy(&m.scales[group], block, 2);
      if (shape.hasMin)
        std::memcpy(&m.mins[group], block + 2, 2);
      std::memcpy(m.values.data() + r * m.rowValueBytes() + b * valueBytes, block + shape.valuesAt,
                  static_cast<size_t>(valueBytes));
    }
  }
  return m;
}

} // namespace kiln::compiler
