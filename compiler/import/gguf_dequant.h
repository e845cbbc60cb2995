// Dequantization of GGUF tensor data to fp32, exactly as ggml defines each block type
// (ggml-common.h block layouts, ggml-quants.c dequantize_row_*): F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Plain C++ (no MLIR).
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <span>
#include <string>

namespace kiln::compiler {

struct GgmlTypeTraits {
  const char *name;   // "Q4_K"
  int64_t blockSize;  // elements per block (1 for F32/F16/BF16, 32, or 256 for the K types)
  int64_t typeSize;   // bytes per block
  bool dequantizable; // kiln reads it
};

// The traits of ggml_type `type`, or nullptr for a number ggml does not define.
const GgmlTypeTraits *ggmlTypeTraits(uint32_t type);
// "Q4_K", or "ggml type 42" for an unknown number.
std::string ggmlTypeName(uint32_t type);
// The types kiln dequantizes, "F32, F16, Q4_0, ..." for messages.
std::string dequantizableList();

// Dequantizes `count` elements (a multiple of the type's block size) stored in `bytes` (exactly
// count / blockSize * typeSize bytes) into `out` (count floats). An unknown or unsupported type,
// a count that is not a whole number of blocks, or a byte size that disagrees is an error.
Status dequantizeGgml(uint32_t type, std::span<const uint8_t> bytes, int64_t count, float *out);

} // namespace kiln::compiler
