#include "compiler/import/hf_quantization.h"

namespace kiln::compiler {
namespace {

Status readGroupSize(const ConfigFields &q, HfQuantization &out) {
  int64_t groupSize = -1;
  KILN_RETURN_IF_ERROR(q.readInt("group_size", groupSize, /*required=*/true));
  if (groupSize != -1 && groupSize <= 0)
    return q.error("group_size", "must be -1 (one scale per output) or positive, got " +
                                     std::to_string(groupSize));
  out.groupSize = groupSize == -1 ? 0 : groupSize;
  return okStatus();
}

Status readGptq(const ConfigFields &q, HfQuantization &out) {
  bool descAct = false;
  KILN_RETURN_IF_ERROR(q.readBool("desc_act", descAct));
  if (descAct)
    return q.error("desc_act", "is true: act-order GPTQ checkpoints (columns regrouped by g_idx) "
                               "are not supported; use one quantized with desc_act false");
  out.symmetric = true;
  KILN_RETURN_IF_ERROR(q.readBool("sym", out.symmetric));
  std::string format = "gptq";
  KILN_RETURN_IF_ERROR(q.readString("checkpoint_format", format));
  if (format != "gptq" && format != "gptq_v2")
    return q.error("checkpoint_format",
                   "'" + format + "' is not supported: kiln reads gptq and gptq_v2");
  out.zerosMinusOne = format == "gptq";
  return okStatus();
}

Status readAwq(const ConfigFields &q) {
  std::string version = "gemm";
  KILN_RETURN_IF_ERROR(q.readString("version", version));
  if (version != "gemm" && version != "GEMM")
    return q.error("version", "'" + version + "' is not supported: kiln reads AWQ's GEMM layout");
  bool zeroPoint = true;
  KILN_RETURN_IF_ERROR(q.readBool("zero_point", zeroPoint));
  if (!zeroPoint)
    return q.error("zero_point", "is false: kiln reads AWQ checkpoints with zero points");
  return okStatus();
}

// transformers' FineGrainedFP8Config: fmt e4m3 (the only one it writes), weight_block_size.
// activation_scheme (dynamic or static) says how the checkpoint's own kernels quantize the
// activations; kiln computes them in the compile's --dtype either way (input_scale tensors of a
// static checkpoint are not read).
Status readFp8(const ConfigFields &q, HfQuantization &out) {
  std::string format = "e4m3";
  KILN_RETURN_IF_ERROR(q.readString("fmt", format));
  if (format != "e4m3")
    return q.error("fmt", "'" + format + "' is not supported: kiln reads e4m3 fp8 weights");
  std::vector<double> block = {128, 128};
  KILN_RETURN_IF_ERROR(q.readDoubles("weight_block_size", block));
  if (block.size() != 2 || block[0] < 1 || block[1] < 1 || block[0] != int64_t(block[0]) ||
      block[1] != int64_t(block[1]))
    return q.error("weight_block_size", "must be two positive integers (outputs, inputs per "
                                        "scale)");
  out.blockRows = int64_t(block[0]);
  out.blockColumns = int64_t(block[1]);
  return okStatus();
}

// llm-compressor's FP8 checkpoints: format float-quantized, one config group whose weights are
// 8-bit floats with a tensor, channel or block strategy (block_structure [outputs, inputs]). The
// input activations' settings (dynamic per token, or static input_scale tensors) say how vLLM's
// kernels quantize activations; kiln computes them in the compile's dtype either way.
Status readCompressedTensors(const ConfigFields &q, HfQuantization &out) {
  std::string format;
  KILN_RETURN_IF_ERROR(q.readString("format", format, /*required=*/true));
  if (format != "float-quantized")
    return q.error("format", "'" + format +
                                 "' is not supported: kiln reads float-quantized (fp8) "
                                 "compressed-tensors checkpoints");
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> groups, q.object("config_groups"));
  if (!groups || groups->keys().size() != 1)
    return q.error("config_groups", "must hold one quantization group (kiln reads checkpoints "
                                    "with one scheme for every linear)");
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> group, groups->object(groups->keys()[0]));
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> weights,
                        group ? group->object("weights") : std::optional<ConfigFields>());
  if (!weights)
    return group ? group->error("weights", "must say how the weights are quantized")
                 : groups->error(groups->keys()[0], "must be an object");
  int64_t bits = 0;
  std::string type, strategy;
  KILN_RETURN_IF_ERROR(weights->readInt("num_bits", bits, /*required=*/true));
  KILN_RETURN_IF_ERROR(weights->readString("type", type, /*required=*/true));
  KILN_RETURN_IF_ERROR(weights->readString("strategy", strategy, /*required=*/true));
  if (bits != 8 || type != "float")
    return weights->error("type", "'" + type + "' with " + std::to_string(bits) +
                                      " bits: kiln reads 8-bit float (fp8) weights");
  out.compressedTensors = true;
  if (strategy == "tensor") {
    out.blockRows = out.blockColumns = 0;
  } else if (strategy == "channel") {
    out.blockRows = 1;
    out.blockColumns = 0;
  } else if (strategy == "block") {
    std::vector<double> block;
    KILN_RETURN_IF_ERROR(weights->readDoubles("block_structure", block, /*required=*/true));
    if (block.size() != 2 || block[0] < 1 || block[1] < 1 || block[0] != int64_t(block[0]) ||
        block[1] != int64_t(block[1]))
      return weights->error("block_structure", "must be two positive integers");
    out.blockRows = int64_t(block[0]);
    out.blockColumns = int64_t(block[1]);
  } else {
    return weights->error("strategy", "'" + strategy +
                                          "' is not supported: kiln reads fp8 "
                                          "weights scaled per tensor, channel or "
                                          "block");
  }
  return okStatus();
}

} // namespace

Result<std::optional<HfQuantization>> parseHfQuantization(const ConfigFields &config) {
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> q, config.object("quantization_config"));
  if (!q)
    return std::optional<HfQuantization>();
  std::string method;
  KILN_RETURN_IF_ERROR(q->readString("quant_method", method, /*required=*/true));
  HfQuantization out;
  if (method == "gptq") {
    out.method = HfQuantization::Method::kGptq;
  } else if (method == "awq") {
    out.method = HfQuantization::Method::kAwq;
  } else if (method == "fp8") {
    out.method = HfQuantization::Method::kFp8;
    KILN_RETURN_IF_ERROR(readFp8(*q, out));
    return std::optional<HfQuantization>(out);
  } else if (method == "compressed-tensors") {
    out.method = HfQuantization::Method::kFp8;
    KILN_RETURN_IF_ERROR(readCompressedTensors(*q, out));
    return std::optional<HfQuantization>(out);
  } else {
    return unimplemented(q->source() + ": field '" + q->field("quant_method") + "' is '" + method +
                         "': kiln reads 4-bit gptq and awq, and fp8 and compressed-tensors fp8 "
                         "checkpoints "
                         "(or compile the unquantized model, with --quantize int8|int4|fp8 if "
                         "wanted)");
  }
  int64_t bits = 0;
  KILN_RETURN_IF_ERROR(q->readInt("bits", bits, /*required=*/true));
  if (bits != 4)
    return q->error("bits", std::to_string(bits) + ": kiln reads 4-bit " + out.methodName() +
                                " checkpoints");
  KILN_RETURN_IF_ERROR(readGroupSize(*q, out));
  if (out.method == HfQuantization::Method::kGptq)
    KILN_RETURN_IF_ERROR(readGptq(*q, out));
  else
    KILN_RETURN_IF_ERROR(readAwq(*q));
  return std::optional<HfQuantization>(out);
}

} // namespace kiln::compiler
