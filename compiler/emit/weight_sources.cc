// Weight binding and byte production. Conversion goes through fp32 (every supported source
// dtype widens exactly to fp32), then rounds to nearest even into the stored dtype.
#include "compiler/emit/weight_sources.h"

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/dialect/source_slice.h"
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

mlir::LogicalResult bindWeight(WeightOp weight, const Checkpoint &checkpoint) {
  llvm::SmallVector<std::string> sources;
  for (mlir::Attribute attr : weight.getSources())
    sources.push_back(mlir::cast<mlir::StringAttr>(attr).str());
  auto type = mlir::cast<mlir::RankedTensorType>(weight.getType());
  bool rebound = false;
  int64_t rows = 0;
  for (std::string &source : sources) {
    std::optional<SourceSlice> slice = parseSourceSlice(source);
    if (!slice)
      return weight.emitError() << "weight '" << weight.getName() << "': malformed source '"
                                << source << "'";
    if (!checkpoint.contains(slice->tensor) && slice->tensor == "model.embed_tokens.weight" &&
        checkpoint.contains("lm_head.weight")) {
      slice->tensor = "lm_head.weight";
      source = formatSourceSlice(*slice);
      rebound = true;
    }
    Result<const TensorInfo *> info = checkpoint.info(slice->tensor);
    if (!info.isOk())
      return weight.emitError() << "weight '" << weight.getName() << "': checkpoint tensor '"
                                << slice->tensor << "' is missing (" << info.status().message()
                                << ")";
    std::string error;
    std::optional<std::vector<int64_t>> shape = slicedShape(*slice, (*info)->shape, error);
    if (!shape)
      return weight.emitError() << "weight '" << weight.getName() << "': source '" << source
                                << "' of shape " << shapeString((*info)->shape) << ": " << error;
    bool trailingMatch =
        shape->size() == static_cast<size_t>(type.getRank()) &&
        llvm::ArrayRef<int64_t>(*shape).drop_front() == type.getShape().drop_front();
    if (!trailingMatch)
      return weight.emitError() << "weight '" << weight.getName() << "': checkpoint tensor '"
                                << source << "' has shape " << shapeString(*shape) << ", expected "
                                << shapeString(type.getShape())
                                << " (rows may differ for a fused part)";
    rows += (*shape)[0];
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

// Appends rows [rowBegin, rowEnd) x cols [colBegin, colEnd) of the row-major tensor `whole`
// (already in `dtype`) to `bytes`; rows past the tensor are zeros.
Status appendSlice(const std::vector<uint8_t> &whole, const std::vector<int64_t> &shape,
                   const SourceSlice &slice, schema::DType dtype, std::vector<uint8_t> &bytes) {
  std::string error;
  std::optional<std::vector<int64_t>> out = slicedShape(slice, shape, error);
  if (!out)
    return invalidArgument("weight source '" + formatSourceSlice(slice) + "': " + error);
  size_t element = dtype == schema::DType::F32 ? 4 : 2;
  size_t width = shape.size() == 2 ? static_cast<size_t>(shape[1]) : 1;
  size_t cols = out->size() == 2 ? static_cast<size_t>((*out)[1]) : 1;
  size_t rowBytes = cols * element;
  for (int64_t r = 0; r < (*out)[0]; ++r) {
    int64_t row = slice.rowBegin + r;
    size_t start = bytes.size();
    bytes.resize(start + rowBytes, 0);
    if (row < shape[0])
      std::memcpy(bytes.data() + start,
                  whole.data() + (static_cast<size_t>(row) * width + slice.colBegin) * element,
                  rowBytes);
  }
  return okStatus();
}

// One source of a quantized weight: its tensor (packed as stored, or quantized now), sliced.
Result<QuantizedMatrix> quantizedSource(const Checkpoint &checkpoint, const std::string &source,
                                        const WeightQuant &quant) {
  std::optional<SourceSlice> slice = parseSourceSlice(source);
  if (!slice || slice->transformed())
    return invalidArgument("weight source '" + source + "' cannot be stored quantized");
  KILN_ASSIGN_OR_RETURN(const TensorInfo *info, checkpoint.info(slice->tensor));
  const int64_t group =
      quant.groupSize ? quant.groupSize : (info->shape.size() == 2 ? info->shape[1] : 0);
  if (info->shape.size() != 2 || !validQuantGroup(info->shape[1], group))
    return invalidArgument("checkpoint tensor '" + slice->tensor + "' cannot be stored " +
                           quantFormatName(quant.format) + " with groups of " +
                           std::to_string(group) +
                           " columns: it is not a matrix whose columns the group divides");
  QuantizedMatrix whole;
  if (info->packed && info->packed->format == quant.format && info->packed->groupSize == group) {
    KILN_ASSIGN_OR_RETURN(whole, checkpoint.readPacked(slice->tensor));
  } else {
    KILN_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.readF32(slice->tensor));
    whole = quantizeMatrix(values, info->shape[0], info->shape[1], quant.format, group);
  }
  if (!slice->sliced())
    return whole;
  return sliceQuantizedMatrix(whole, slice->rowBegin,
                              slice->rowEnd < 0 ? whole.rows : slice->rowEnd, slice->colBegin,
                              slice->colEnd < 0 ? whole.cols : slice->colEnd);
}

} // namespace

schema::DType quantDType(QuantFormat format) {
  switch (format) {
  case QuantFormat::kQ8:
    return schema::DType::Q8;
  case QuantFormat::kQ4:
    return schema::DType::Q4;
  case QuantFormat::kQ4Min:
    return schema::DType::Q4M;
  case QuantFormat::kQ8Float:
    return schema::DType::Q8F;
  case QuantFormat::kQ8FloatF32:
    return schema::DType::Q8F32;
  case QuantFormat::kQ4Zero:
    break;
  }
  return schema::DType::Q4Z;
}

Status produceQuantizedWeightBytes(const Checkpoint &checkpoint,
                                   const std::vector<std::string> &sources,
                                   const WeightQuant &quant, std::vector<uint8_t> &bytes) {
  std::optional<QuantizedMatrix> matrix;
  for (const std::string &source : sources) {
    KILN_ASSIGN_OR_RETURN(QuantizedMatrix part, quantizedSource(checkpoint, source, quant));
    if (!matrix)
      matrix = std::move(part);
    else
      KILN_RETURN_IF_ERROR(appendQuantizedRows(*matrix, part));
  }
  if (!matrix)
    return invalidArgument("a quantized weight needs at least one source");
  bytes = matrix->bytes();
  return okStatus();
}

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
  case TensorDType::kI32:    // never a weight's own values (hf_quantized_checkpoint.h)
  case TensorDType::kF8E4M3: // read through its scales (hf_fp8_checkpoint.h)
    break;
  }
  return schema::DType::F32;
}

mlir::LogicalResult bindWeightSources(mlir::ModuleOp module, const Checkpoint &checkpoint) {
  mlir::WalkResult result = module.walk([&](WeightOp weight) {
    return failed(bindWeight(weight, checkpoint)) ? mlir::WalkResult::interrupt()
                                                  : mlir::WalkResult::advance();
  });
  return mlir::failure(result.wasInterrupted());
}

namespace {

// values (a tensor of `shape`) += row slice.addRow of slice.addRowTensor (-= with
// slice.subtractRow), on every row, in fp32.
Status addRowOf(const Checkpoint &checkpoint, const SourceSlice &slice,
                const std::vector<int64_t> &shape, std::vector<float> &values) {
  KILN_ASSIGN_OR_RETURN(const TensorInfo *other, checkpoint.info(slice.addRowTensor));
  if (shape.size() != 2 || other->shape.size() != 2 || other->shape[1] != shape[1] ||
      slice.addRow >= other->shape[0])
    return invalidArgument("weight source adds row " + std::to_string(slice.addRow) + " of '" +
                           slice.addRowTensor + "' to '" + slice.tensor +
                           "': both must be matrices of one width with that row");
  KILN_ASSIGN_OR_RETURN(std::vector<float> rows, checkpoint.readF32(slice.addRowTensor));
  const float *row = rows.data() + slice.addRow * shape[1];
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = slice.subtractRow ? values[i] - row[i % shape[1]] : values[i] + row[i % shape[1]];
  return okStatus();
}

} // namespace

Status produceWeightBytes(const Checkpoint &checkpoint, const std::vector<std::string> &sources,
                          schema::DType dtype, std::vector<uint8_t> &bytes) {
  if (dtype != schema::DType::F32 && dtype != schema::DType::F16 && dtype != schema::DType::BF16)
    return invalidArgument("weights can be stored as F32, F16 or BF16, not " +
                           std::string(schema::EnumNameDType(dtype)));
  bytes.clear();
  std::vector<uint8_t> whole;
  for (const std::string &source : sources) {
    std::optional<SourceSlice> slice = parseSourceSlice(source);
    if (!slice)
      return invalidArgument("malformed weight source '" + source + "'");
    KILN_ASSIGN_OR_RETURN(const TensorInfo *info, checkpoint.info(slice->tensor));
    bool raw = !slice->transformed() && info->rawReadable && toSchemaDType(info->dtype) == dtype;
    std::vector<uint8_t> &target = slice->sliced() ? whole : bytes;
    if (slice->sliced())
      whole.clear();
    if (raw) {
      KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> data, checkpoint.rawBytes(slice->tensor));
      target.insert(target.end(), data.begin(), data.end());
    } else {
      KILN_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.readF32(slice->tensor));
      if (slice->plusOne) // as transformers' Gemma RMSNorm: 1.0 + weight.float()
        for (float &v : values)
          v += 1.0f;
      if (!slice->addRowTensor.empty())
        KILN_RETURN_IF_ERROR(addRowOf(checkpoint, *slice, info->shape, values));
      appendConverted(values, dtype, target);
    }
    if (slice->sliced())
      KILN_RETURN_IF_ERROR(appendSlice(whole, info->shape, *slice, dtype, bytes));
  }
  return okStatus();
}

} // namespace kiln::compiler
