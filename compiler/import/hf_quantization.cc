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

} // namespace

Result<std::optional<HfQuantization>> parseHfQuantization(const ConfigFields &config) {
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> q, config.object("quantization_config"));
  if (!q)
    return std::optional<HfQuantization>();
  std::string method;
  KILN_RETURN_IF_ERROR(q->readString("quant_method", method, /*required=*/true));
  HfQuantization out;
  if (method == "gptq")
    out.method = HfQuantization::Method::kGptq;
  else if (method == "awq")
    out.method = HfQuantization::Method::kAwq;
  else
    return unimplemented(q->source() + ": field '" + q->field("quant_method") + "' is '" + method +
                         "': kiln reads 4-bit gptq and awq checkpoints (or compile the "
                         "unquantized model, with --quantize int8|int4 if wanted)");
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
