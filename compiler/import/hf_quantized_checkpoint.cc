#include "compiler/import/hf_quantized_checkpoint.h"

#include "runtime/base/half.h"

#include <algorithm>
#include <cstring>

namespace kiln::compiler {
namespace {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Value i (4 bits) of the int32 word at `bytes` + 4 * index.
uint8_t nibbleOf(std::span<const uint8_t> bytes, int64_t index, int value) {
  uint32_t word;
  std::memcpy(&word, bytes.data() + 4 * index, 4);
  return static_cast<uint8_t>((word >> (4 * value)) & 0xF);
}

Status expectShape(const TensorInfo &info, TensorDType dtype, std::vector<int64_t> shape,
                   const std::string &layout) {
  if (info.dtype == dtype && info.shape == shape)
    return okStatus();
  std::string want, got;
  for (int64_t d : shape)
    want += (want.empty() ? "" : ", ") + std::to_string(d);
  for (int64_t d : info.shape)
    got += (got.empty() ? "" : ", ") + std::to_string(d);
  return invalidArgument("tensor '" + info.name + "' is " + tensorDTypeName(info.dtype) + " [" +
                         got + "]; the " + layout + " layout needs " + tensorDTypeName(dtype) +
                         " [" + want + "]");
}

} // namespace

Result<std::shared_ptr<const HfQuantizedCheckpoint>>
HfQuantizedCheckpoint::create(std::shared_ptr<const Checkpoint> stored,
                              const HfQuantization &quantization) {
  std::shared_ptr<HfQuantizedCheckpoint> checkpoint(
      new HfQuantizedCheckpoint(std::move(stored), quantization));
  const std::string suffix = ".qweight";
  for (const std::string &name : checkpoint->stored_->names())
    if (endsWith(name, suffix))
      KILN_RETURN_IF_ERROR(checkpoint->addLinear(name.substr(0, name.size() - suffix.size())));
  const auto &linears = checkpoint->linears_;
  checkpoint->listNames([&](const std::string &name) {
    const size_t dot = name.rfind('.');
    const std::string prefix = name.substr(0, dot), leaf = name.substr(dot + 1);
    const bool part = leaf == "qweight" || leaf == "qzeros" || leaf == "scales" || leaf == "g_idx";
    return part && linears.count(prefix + ".weight");
  });
  return std::shared_ptr<const HfQuantizedCheckpoint>(std::move(checkpoint));
}

Status HfQuantizedCheckpoint::addLinear(const std::string &prefix) {
  const bool gptq = quantization_.method == HfQuantization::Method::kGptq;
  const std::string layout =
      std::string(quantization_.methodName()) + " (config.json " + "quantization_config)";
  for (const char *part : {".qzeros", ".scales"})
    if (!stored_->contains(prefix + part))
      return invalidArgument("checkpoint: '" + prefix + ".qweight' has no '" + prefix + part +
                             "' (the " + layout + " layout stores both)");
  KILN_ASSIGN_OR_RETURN(const TensorInfo *qweight, stored_->info(prefix + ".qweight"));
  KILN_ASSIGN_OR_RETURN(const TensorInfo *scales, stored_->info(prefix + ".scales"));
  if (qweight->shape.size() != 2 || qweight->dtype != TensorDType::kI32)
    return invalidArgument("tensor '" + qweight->name + "' must be an I32 matrix (the " + layout +
                           " layout)");
  // The shape of the weight, from qweight's: GPTQ packs down the inputs, AWQ across the outputs.
  const int64_t out = gptq ? qweight->shape[1] : qweight->shape[1] * 8;
  const int64_t in = gptq ? qweight->shape[0] * 8 : qweight->shape[0];
  const int64_t groupSize = quantization_.groupSize > 0 ? quantization_.groupSize : in;
  if (out % 8 != 0 || in % groupSize != 0)
    return invalidArgument("tensor '" + qweight->name + "': " + std::to_string(out) +
                           " outputs and " + std::to_string(in) + " inputs do not fit the " +
                           layout + " layout with group_size " + std::to_string(groupSize));
  const int64_t groups = in / groupSize;
  KILN_RETURN_IF_ERROR(expectShape(*scales, TensorDType::kF16, {groups, out}, layout));
  KILN_ASSIGN_OR_RETURN(const TensorInfo *qzeros, stored_->info(prefix + ".qzeros"));
  KILN_RETURN_IF_ERROR(expectShape(*qzeros, TensorDType::kI32, {groups, out / 8}, layout));
  if (gptq && stored_->contains(prefix + ".g_idx")) {
    KILN_ASSIGN_OR_RETURN(const TensorInfo *gIdx, stored_->info(prefix + ".g_idx"));
    KILN_RETURN_IF_ERROR(expectShape(*gIdx, TensorDType::kI32, {in}, layout));
    KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, stored_->rawBytes(gIdx->name));
    for (int64_t k = 0; k < in; ++k) {
      int32_t group;
      std::memcpy(&group, bytes.data() + 4 * k, 4);
      if (group != k / groupSize)
        return invalidArgument("tensor '" + gIdx->name + "': column " + std::to_string(k) +
                               " is in group " + std::to_string(group) + ", not " +
                               std::to_string(k / groupSize) +
                               ": act-order (desc_act) GPTQ checkpoints are not supported");
    }
  }
  Linear linear;
  linear.prefix = prefix;
  linear.groupSize = groupSize;
  linear.info.name = prefix + ".weight";
  linear.info.dtype = TensorDType::kF32; // fp16 scale x a small integer: exact in fp32
  linear.info.rawReadable = false;
  linear.info.shape = {out, in};
  if (validQuantGroup(in, groupSize))
    linear.info.packed = TensorInfo::Packed{
        gptq && quantization_.symmetric ? QuantFormat::kQ4 : QuantFormat::kQ4Zero, groupSize};
  addWeight(linear.info);
  linears_[linear.info.name] = std::move(linear);
  return okStatus();
}

Result<HfQuantizedCheckpoint::Unpacked> HfQuantizedCheckpoint::unpack(const Linear &linear) const {
  const int64_t out = linear.info.shape[0], in = linear.info.shape[1];
  const int64_t groups = in / linear.groupSize;
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> qweight,
                        stored_->rawBytes(linear.prefix + ".qweight"));
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> qzeros,
                        stored_->rawBytes(linear.prefix + ".qzeros"));
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> scales,
                        stored_->rawBytes(linear.prefix + ".scales"));
  const bool gptq = quantization_.method == HfQuantization::Method::kGptq;
  int awqValue[8]; // the word value that holds output o % 8
  for (int j = 0; j < 8; ++j)
    awqValue[kAwqOrder[j]] = j;
  Unpacked u;
  u.q.resize(size_t(out * in));
  u.zeros.resize(size_t(out * groups));
  u.scales.resize(size_t(out * groups));
  for (int64_t k = 0; k < in; ++k)
    for (int64_t o = 0; o < out; ++o)
      u.q[size_t(o * in + k)] = gptq ? nibbleOf(qweight, (k / 8) * out + o, int(k % 8))
                                     : nibbleOf(qweight, k * (out / 8) + o / 8, awqValue[o % 8]);
  const int zeroOffset = gptq && quantization_.zerosMinusOne ? 1 : 0;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t o = 0; o < out; ++o) {
      const int value = gptq ? int(o % 8) : awqValue[o % 8];
      u.zeros[size_t(o * groups + g)] =
          static_cast<uint8_t>(nibbleOf(qzeros, g * (out / 8) + o / 8, value) + zeroOffset);
      std::memcpy(&u.scales[size_t(o * groups + g)], scales.data() + 2 * (g * out + o), 2);
    }
  return u;
}

Result<std::vector<float>> HfQuantizedCheckpoint::readF32(const std::string &name) const {
  auto it = linears_.find(name);
  if (it == linears_.end())
    return stored_->readF32(name);
  const Linear &linear = it->second;
  KILN_ASSIGN_OR_RETURN(Unpacked u, unpack(linear));
  const int64_t out = linear.info.shape[0], in = linear.info.shape[1];
  const int64_t groups = in / linear.groupSize;
  std::vector<float> values(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) {
      const size_t slot = size_t(o * groups + k / linear.groupSize);
      values[size_t(o * in + k)] =
          f16ToF32(u.scales[slot]) * float(int(u.q[size_t(o * in + k)]) - int(u.zeros[slot]));
    }
  return values;
}

Result<QuantizedMatrix> HfQuantizedCheckpoint::readPacked(const std::string &name) const {
  auto it = linears_.find(name);
  if (it == linears_.end() || !it->second.info.packed)
    return Checkpoint::readPacked(name);
  const Linear &linear = it->second;
  KILN_ASSIGN_OR_RETURN(Unpacked u, unpack(linear));
  const int64_t out = linear.info.shape[0], in = linear.info.shape[1];
  QuantizedMatrix m;
  m.format = linear.info.packed->format;
  if (m.format == QuantFormat::kQ4) {
    for (size_t i = 0; i < u.zeros.size(); ++i)
      if (u.zeros[i] != 8)
        return invalidArgument("tensor '" + linear.prefix + ".qzeros': zero point " +
                               std::to_string(u.zeros[i]) +
                               " in a checkpoint whose quantization_config says sym: true");
  } else {
    m.mins.assign(u.zeros.begin(), u.zeros.end()); // Q4Z: the integer zero points
  }
  m.groupSize = linear.groupSize;
  m.rows = out;
  m.cols = in;
  m.values.assign(size_t(m.rowValueBytes() * out), 0);
  m.scales = std::move(u.scales);
  // quant_layout.h: in each run of 32 values of a row, byte b holds value b (low nibble) and
  // value b + 16 (high nibble).
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) {
      const int64_t within = k % kQuantSubBlock;
      uint8_t &byte = m.values[size_t(o * m.rowValueBytes() + (k - within) / 2 + within % 16)];
      byte |= static_cast<uint8_t>(u.q[size_t(o * in + k)] << (within < 16 ? 0 : 4));
    }
  return m;
}

} // namespace kiln::compiler
