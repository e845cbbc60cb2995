#include "compiler/import/checkpoint.h"

namespace kiln::compiler {

const char *tensorDTypeName(TensorDType dtype) {
  switch (dtype) {
  case TensorDType::kF32:
    return "F32";
  case TensorDType::kF16:
    return "F16";
  case TensorDType::kBF16:
    return "BF16";
  case TensorDType::kI32:
    return "I32";
  case TensorDType::kF8E4M3:
    return "F8_E4M3";
  }
  return "?";
}

size_t tensorDTypeSize(TensorDType dtype) {
  return dtype == TensorDType::kF32 || dtype == TensorDType::kI32 ? 4
         : dtype == TensorDType::kF8E4M3                          ? 1
                                                                  : 2;
}

Result<QuantizedMatrix> Checkpoint::readPacked(const std::string &name) const {
  return unimplemented("checkpoint tensor '" + name + "' is not stored in a packed quantized form");
}

int64_t TensorInfo::numElements() const {
  int64_t n = 1;
  for (int64_t dim : shape)
    n *= dim;
  return n;
}

} // namespace kiln::compiler
