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
    return 1;
  }
  return 0;
}

std::string dtypeName(schema::DType dtype) {
  if (dtypeSize(dtype) == 0)
    return "DType(" + std::to_string(static_cast<int>(dtype)) + ")";
  return schema::EnumNameDType(dtype);
}

bool isFloatDType(schema::DType dtype) {
  return dtype == schema::DType::F32 || dtype == schema::DType::F16 || dtype == schema::DType::BF16;
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
