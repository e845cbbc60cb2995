// Weight binding and byte production. Conversion goes through fp32 (every supported source
// dtype widens exactly to fp32), then rounds to nearest even into the stored dtype.
#include "compiler/emit/weight_sources.h"

#include "compiler/dialect/kiln_dialect.h"
#include "runtime/base/half.h"

#include "mlir/IR/Builders.h"

#include <cstring>

namespace kiln::compiler {
namespace {

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

mlir::LogicalResult bindWeight(WeightOp weight, const SafetensorsCheckpoint &checkpoint) {
  llvm::SmallVector<std::string> sources;
  for (mlir::Attribute attr : weight.getSources())
    sources.push_back(mlir::cast<mlir::StringAttr>(attr).str());
  auto type = mlir::cast<mlir::RankedTensorType>(weight.getType());
  bool rebound = false;
  int64_t rows = 0;
  for (std::string &source : sources) {
    if (!checkpoint.contains(source) && source == "model.embed_tokens.weight" &&
        checkpoint.contains("lm_head.weight")) {
      source = "lm_head.weight";
      rebound = true;
    }
    Result<const TensorInfo *> info = checkpoint.info(source);
    if (!info.isOk())
      return weight.emitError() << "weight '" << weight.getName() << "': checkpoint tensor '"
                                << source << "' is missing (" << info.status().message() << ")";
    const std::vector<int64_t> &shape = (*info)->shape;
    bool trailingMatch = shape.size() == static_cast<size_t>(type.getRank()) &&
                         llvm::ArrayRef<int64_t>(shape).drop_front() ==
                             type.getShape().drop_front();
    if (!trailingMatch)
      return weight.emitError() << "weight '" << weight.getName() << "': checkpoint tensor '"
                                << source << "' has shape " << shapeString(shape)
                                << ", expected " << shapeString(type.getShape())
                                << " (rows may differ for a fused part)";
    rows += shape[0];
  }
  if (rows != type.getDimSize(0))
    return weight.emitError() << "weight '" << weight.getName() << "': its checkpoint tensors have "
                              << rows << " rows in total, expected " << type.getDimSize(0)
                              << " (config.json and the checkpoint disagree)";
  if (rebound) {
    mlir::Builder builder(weight.getContext());
    llvm::SmallVector<llvm::StringRef> names(sources.begin(), sources.end());
    weight.setSourcesAttr(builder.getStrArrayAttr(names));
  }
  return mlir::success();
}

void appendConverted(const std::vector<float> &values, schema::DType dtype,
                     std::vector<uint8_t> &bytes) {
  size_t start = bytes.size();
  if (dtype == schema::DType::F32) {
    bytes.resize(start + values.size() * 4);
    std::memcpy(bytes.data() + start, values.data(), values.size() * 4);
    return;
  }
  bytes.resize(start + values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t half = dtype == schema::DType::F16 ? f32ToF16(values[i]) : f32ToBf16(values[i]);
    std::memcpy(bytes.data() + start + 2 * i, &half, 2);
  }
}

} // namespace

schema::DType storedDType(mlir::Type type) {
  if (type.isF16())
    return schema::DType::F16;
  if (type.isBF16())
    return schema::DType::BF16;
  return schema::DType::F32;
}

schema::DType toSchemaDType(TensorDType dtype) {
  switch (dtype) {
  case TensorDType::kF16:
    return schema::DType::F16;
  case TensorDType::kBF16:
    return schema::DType::BF16;
  case TensorDType::kF32:
    break;
  }
  return schema::DType::F32;
}

mlir::LogicalResult bindWeightSources(mlir::ModuleOp module,
                                      const SafetensorsCheckpoint &checkpoint) {
  mlir::WalkResult result = module.walk([&](WeightOp weight) {
    return failed(bindWeight(weight, checkpoint)) ? mlir::WalkResult::interrupt()
                                                  : mlir::WalkResult::advance();
  });
  return mlir::failure(result.wasInterrupted());
}

Status produceWeightBytes(const SafetensorsCheckpoint &checkpoint,
                          const std::vector<std::string> &sources, schema::DType dtype,
                          std::vector<uint8_t> &bytes) {
  if (dtype != schema::DType::F32 && dtype != schema::DType::F16 && dtype != schema::DType::BF16)
    return invalidArgument("weights can be stored as F32, F16 or BF16, not " +
                           std::string(schema::EnumNameDType(dtype)));
  bytes.clear();
  for (const std::string &source : sources) {
    KILN_ASSIGN_OR_RETURN(const TensorInfo *info, checkpoint.info(source));
    if (toSchemaDType(info->dtype) == dtype) {
      KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> raw, checkpoint.rawBytes(source));
      bytes.insert(bytes.end(), raw.begin(), raw.end());
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.readF32(source));
    appendConverted(values, dtype, bytes);
  }
  return okStatus();
}

} // namespace kiln::compiler
