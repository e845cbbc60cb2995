// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3 (per-head q/k norms) whose MLPs are mixtures of
// experts: a router linear (mlp.gate) over num_experts experts of moe_intermediate_size, the top
// num_experts_per_tok by softmax probability, renormalized to sum 1 when norm_topk_prob; layers
// listed in mlp_only_layers, or whose index + 1 is not a multiple of decoder_sparse_step, keep a
// dense MLP of intermediate_size (transformers' Qwen3MoeDecoderLayer rule).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseQwen3Moe(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.qkvBias = config.oBias = config.attentionBias;
  config.qkNorm = true;
  KILN_RETURN_IF_ERROR(readQwenExperts(fields, config));
  return readQwenLayerWindows(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildQwen3Moe(mlir::MLIRContext &context,
                                                                 const HfModelConfig &config,
                                                                 const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &qwen3MoeFamily() {
  static const ModelFamily family{
      "qwen3_moe", {"qwen3_moe"}, {"Qwen3MoeForCausalLM"}, &parseQwen3Moe, &buildQwen3Moe};
  return family;
}

} // namespace kiln::compiler
