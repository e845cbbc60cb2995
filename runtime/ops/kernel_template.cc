#include "runtime/ops/kernel_template.h"

#include <algorithm>

namespace kiln::rt {

std::string kernelSymbol(const std::string &op,
                         const std::map<std::string, std::string> &constants) {
  std::string symbol = "kiln_" + op;
  for (const auto &[name, value] : constants)
    symbol += "_" + value;
  return symbol;
}

KernelInstance makeKernelInstance(const std::string &op,
                                  std::map<std::string, std::string> constants) {
  std::string symbol = kernelSymbol(op, constants);
  return {op, std::move(symbol), std::move(constants)};
}

std::string kernelDType(schema::DType dtype) {
  return dtype == schema::DType::F16      ? "f16"
         : dtype == schema::DType::BF16   ? "bf16"
         : dtype == schema::DType::F8E4M3 ? "f8"
                                          : "f32";
}

int64_t threadsFor(int64_t elements, int64_t cap) {
  return std::clamp<int64_t>((elements + 31) / 32 * 32, 32, cap);
}

int64_t vectorsPerRow(int64_t width, const std::string &dtype) {
  const int64_t wide = dtype == "f32" ? 4 : 8;
  return width % wide == 0 ? width / wide : width;
}

} // namespace kiln::rt
