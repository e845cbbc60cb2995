#include "runtime/ops/plan_types.h"

namespace kiln::rt {

size_t dtypeSize(schema::DType dtype) {
  switch (dtype) {
  case schema::DType::F32:
    return 4;
  case schema::DType::F16:
    return 2;
  case schema::DType::BF16:
    return 2;
  case schema::DType::I32:
    return 4;
  case schema::DType::I64:
    return 8;
  case schema::DType::U8:
  case schema::DType::F8E4M3:
    return 1;
  }
  return 0;
}

std::string dtypeName(schema::DType dtype) {
  if (dtypeSize(dtype) == 0 && !isQuantDType(dtype))
    return "DType(" + std::to_string(static_cast<int>(dtype)) + ")";
  return schema::EnumNameDType(dtype);
}

bool isFloatDType(schema::DType dtype) {
  return dtype == schema::DType::F32 || dtype == schema::DType::F16 || dtype == schema::DType::BF16;
}

bool isKvCacheDType(schema::DType dtype) {
  return isFloatDType(dtype) || dtype == schema::DType::F8E4M3;
}

bool isQuantDType(schema::DType dtype) {
  return dtype == schema::DType::Q8 || dtype == schema::DType::Q4 || dtype == schema::DType::Q4M ||
         dtype == schema::DType::Q4Z || dtype == schema::DType::Q8F ||
         dtype == schema::DType::Q8F32;
}

QuantFormat quantFormatOf(schema::DType dtype) {
  return dtype == schema::DType::Q8      ? QuantFormat::kQ8
         : dtype == schema::DType::Q4    ? QuantFormat::kQ4
         : dtype == schema::DType::Q4M   ? QuantFormat::kQ4Min
         : dtype == schema::DType::Q8F   ? QuantFormat::kQ8Float
         : dtype == schema::DType::Q8F32 ? QuantFormat::kQ8FloatF32
                                         : QuantFormat::kQ4Zero;
}

WeightSize quantWeightSize(schema::DType dtype, uint64_t rows, uint64_t cols, uint64_t groupSize) {
  constexpr uint64_t kMaxDim = uint64_t(1) << 31;
  if (!isQuantDType(dtype))
    return {0, dtypeName(dtype) + " is not a quantized dtype"};
  if (rows == 0 || rows > kMaxDim || cols > kMaxDim ||
      !validQuantGroup(static_cast<int64_t>(cols), static_cast<int64_t>(groupSize)))
    return {0, "a " + dtypeName(dtype) + " matrix [" + std::to_string(rows) + ", " +
                   std::to_string(cols) + "] needs rows and cols in [1, 2^31] and a group_size (" +
                   std::to_string(groupSize) + ") that is a multiple of " +
                   std::to_string(kQuantSubBlock) + " and divides cols"};
  return {quantLayout(quantFormatOf(dtype), static_cast<int64_t>(rows), static_cast<int64_t>(cols),
                      static_cast<int64_t>(groupSize))
              .totalBytes,
          ""};
}

WeightSize weightSize(schema::DType dtype, std::span<const uint64_t> shape, uint64_t groupSize) {
  if (isQuantDType(dtype)) {
    if (shape.size() != 2)
      return {0, "a " + dtypeName(dtype) + " weight is a matrix; its shape has " +
                     std::to_string(shape.size()) + " dims"};
    return quantWeightSize(dtype, shape[0], shape[1], groupSize);
  }
  if (groupSize != 0)
    return {0, "group_size " + std::to_string(groupSize) + " on a " + dtypeName(dtype) +
                   " weight (only Q8, Q4, Q4M, Q4Z, Q8F and Q8F32 have groups)"};
  uint64_t bytes = dtypeSize(dtype);
  if (bytes == 0)
    return {0, "unknown dtype " + dtypeName(dtype)};
  for (uint64_t dim : shape) {
    if (dim != 0 && bytes > UINT64_MAX / dim)
      return {0, "its size overflows 64 bits"};
    bytes *= dim;
  }
  return {bytes, ""};
}

std::string weightFormatName(schema::DType dtype, uint64_t groupSize) {
  std::string name = dtypeName(dtype);
  return isQuantDType(dtype) ? name + " g" + std::to_string(groupSize) : name;
}

std::string opKindName(schema::OpParams kind) {
  if (kind == schema::OpParams::NONE || kind > schema::OpParams::MAX)
    return "OpParams(" + std::to_string(static_cast<int>(kind)) + ")";
  std::string name = schema::EnumNameOpParams(kind);
  return name.substr(0, name.size() - 6); // drop "Params"
}

std::string opLabel(const schema::Op &op) {
  return "op '" + (op.name() ? op.name()->str() : std::string()) + "' (" +
         opKindName(op.params_type()) + ")";
}

} // namespace kiln::rt
