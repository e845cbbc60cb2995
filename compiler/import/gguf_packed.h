// GGUF blocks that the artifact keeps packed (compiler/import/quantized_matrix.h): Q8_0 is Q8,
// Q4_0 is Q4 and Q4_1 is Q4M, all with groups of 32, the blocks' own scales (and mins) and the
// same nibble order, so unpacking only moves bytes (ggml-common.h block layouts, as
// gguf_dequant.h reads them). Plain C++ (no MLIR).
#pragma once

#include "compiler/import/checkpoint.h"

#include <functional>
#include <optional>
#include <span>

namespace kiln::compiler {

// The packed form of ggml type `type` for a matrix of `cols` columns, or nullopt (another type,
// or columns that are not whole blocks).
std::optional<TensorInfo::Packed> ggmlPackedForm(uint32_t type, int64_t cols);

// The matrix [rows, cols] stored as blocks of `type` in `bytes`; output row r is stored row
// storedRow(r) (llama.cpp's permuted q/k rows). The caller checked ggmlPackedForm and the size.
QuantizedMatrix unpackGgmlBlocks(uint32_t type, std::span<const uint8_t> bytes, int64_t rows,
                                 int64_t cols, const std::function<int64_t(int64_t)> &storedRow);

} // namespace kiln::compiler
