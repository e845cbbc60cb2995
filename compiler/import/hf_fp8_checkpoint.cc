#include "compiler/import/hf_fp8_checkpoint.h"

#include "runtime/base/fp8.h"

#include <algorithm>
#include <cstring>

namespace kiln::compiler {
namespace {

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text;
  for (int64_t d : shape)
    text += (text.empty() ? "" : ", ") + std::to_string(d);
  return "[" + text + "]";
}

int64_t blocksOf(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}

} // namespace

Result<std::shared_ptr<const HfFp8Checkpoint>>
HfFp8Checkpoint::create(std::shared_ptr<const Checkpoint> stored,
                        const HfQuantization &quantization) {
  std::shared_ptr<HfFp8Checkpoint> checkpoint(new HfFp8Checkpoint(std::move(stored), quantization));
  for (const std::string &name : checkpoint->stored_->names()) {
    KILN_ASSIGN_OR_RETURN(const TensorInfo *info, checkpoint->stored_->info(name));
    if (info->dtype == TensorDType::kF8E4M3)
      KILN_RETURN_IF_ERROR(checkpoint->addLinear(*info));
  }
  checkpoint->listNames([](const std::string &name) {
    return endsWith(name, ".weight_scale_inv") || endsWith(name, ".weight_scale") ||
           endsWith(name, ".input_scale") || endsWith(name, ".k_scale") ||
           endsWith(name, ".v_scale");
  });
  return std::shared_ptr<const HfFp8Checkpoint>(std::move(checkpoint));
}

Status HfFp8Checkpoint::addLinear(const TensorInfo &weight) {
  const std::string layout =
      std::string(quantization_.methodName()) + " (config.json quantization_config)";
  if (weight.shape.size() != 2 || !endsWith(weight.name, ".weight"))
    return invalidArgument("tensor '" + weight.name + "' is F8_E4M3 " + shapeText(weight.shape) +
                           ": the " + layout +
                           " layout stores only linears' [out, in] weights "
                           "in fp8");
  const std::string scaleName =
      weight.name + (quantization_.compressedTensors ? "_scale" : "_scale_inv");
  if (!stored_->contains(scaleName))
    return invalidArgument("checkpoint: '" + weight.name + "' has no '" + scaleName + "' (the " +
                           layout + " layout stores its fp32 scales)");
  KILN_ASSIGN_OR_RETURN(const TensorInfo *scales, stored_->info(scaleName));
  Linear linear;
  linear.blockRows = quantization_.blockRows ? quantization_.blockRows : weight.shape[0];
  linear.blockColumns = quantization_.blockColumns ? quantization_.blockColumns : weight.shape[1];
  const int64_t rows = blocksOf(weight.shape[0], linear.blockRows);
  const int64_t columns = blocksOf(weight.shape[1], linear.blockColumns);
  // The grid as stored: [rows, columns], or without a trailing 1 ([out] per channel, [1] or a
  // scalar per tensor).
  const std::vector<int64_t> &shape = scales->shape;
  const bool gridShape = shape == std::vector<int64_t>{rows, columns} ||
                         (columns == 1 && shape == std::vector<int64_t>{rows}) ||
                         (rows == 1 && columns == 1 && shape.empty());
  if (scales->dtype != TensorDType::kF32 || !gridShape)
    return invalidArgument(
        "tensor '" + scaleName + "' is " + tensorDTypeName(scales->dtype) + " " + shapeText(shape) +
        "; the " + layout + " layout with blocks of [" + std::to_string(linear.blockRows) + ", " +
        std::to_string(linear.blockColumns) + "] needs F32 " + shapeText({rows, columns}));
  linear.out = weight.shape[0];
  linear.in = weight.shape[1];
  linear.scaleName = scaleName;
  TensorInfo info = weight;
  info.dtype = TensorDType::kF32;
  info.rawReadable = false;
  if (validQuantGroup(linear.in, linear.blockColumns)) {
    info.packed = TensorInfo::Packed{QuantFormat::kQ8FloatF32, linear.blockColumns};
    ++packable_;
  }
  addWeight(info);
  linears_[weight.name] = std::move(linear);
  return okStatus();
}

Result<std::vector<float>> HfFp8Checkpoint::readF32(const std::string &name) const {
  auto it = linears_.find(name);
  if (it == linears_.end())
    return stored_->readF32(name);
  const Linear &linear = it->second;
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> codes, stored_->rawBytes(name));
  KILN_ASSIGN_OR_RETURN(std::vector<float> scales, stored_->readF32(linear.scaleName));
  const int64_t out = linear.out, in = linear.in;
  const int64_t columns = blocksOf(in, linear.blockColumns);
  std::vector<float> values(size_t(out * in));
  for (int64_t o = 0; o < out; ++o) {
    const float *rowScales = scales.data() + (o / linear.blockRows) * columns;
    for (int64_t k = 0; k < in; ++k)
      values[size_t(o * in + k)] =
          f8e4m3ToF32(codes[size_t(o * in + k)]) * rowScales[k / linear.blockColumns];
  }
  return values;
}

Result<QuantizedMatrix> HfFp8Checkpoint::readPacked(const std::string &name) const {
  auto it = linears_.find(name);
  KILN_ASSIGN_OR_RETURN(const TensorInfo *info, this->info(name));
  if (it == linears_.end() || !info->packed)
    return Checkpoint::readPacked(name);
  const Linear &linear = it->second;
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> codes, stored_->rawBytes(name));
  KILN_ASSIGN_OR_RETURN(std::vector<float> scales, stored_->readF32(linear.scaleName));
  QuantizedMatrix m =
      zeroQuantizedMatrix(QuantFormat::kQ8FloatF32, linear.blockColumns, linear.out, linear.in);
  for (size_t i = 0; i < codes.size(); ++i)
    if ((codes[i] & 0x7F) == 0x7F)
      return invalidArgument("tensor '" + name + "' holds an fp8 NaN at [" +
                             std::to_string(i / size_t(linear.in)) + ", " +
                             std::to_string(i % size_t(linear.in)) + "]");
  std::copy(codes.begin(), codes.end(), m.values.begin());
  const int64_t groups = m.groupsPerRow();
  for (int64_t o = 0; o < linear.out; ++o)
    for (int64_t g = 0; g < groups; ++g)
      m.wideScales[size_t(o * groups + g)] = scales[size_t((o / linear.blockRows) * groups + g)];
  return m;
}

} // namespace kiln::compiler
