// Qwen2-MoE (Qwen2MoeForCausalLM: Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2 (q/k/v biases from
// `qkv_bias`, default true; no o bias) whose MLPs are Qwen3-MoE's routed experts (readQwenExperts:
// softmax top num_experts_per_tok, renormalized only when norm_topk_prob; dense layers by
// mlp_only_layers / decoder_sparse_step) plus a shared expert: a SwiGLU MLP of
// shared_expert_intermediate_size (mlp.shared_expert.*) every token runs, its output scaled by
// sigmoid(x . mlp.shared_expert_gate) and added to the routed experts' (kiln.sigmoid_gated_add).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseQwen2Moe(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.qkvBias = true; // Qwen2MoeConfig's default; the published configs do not set it
  KILN_RETURN_IF_ERROR(fields.readBool("qkv_bias", config.qkvBias));
  config.oBias = false;
  KILN_RETURN_IF_ERROR(readQwenExperts(fields, config));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("shared_expert_intermediate_size",
                                              config.sharedExpertIntermediate, true));
  return readQwenLayerWindows(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildQwen2Moe(mlir::MLIRContext &context,
                                                                 const HfModelConfig &config,
                                                                 const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &qwen2MoeFamily() {
  static const ModelFamily family{
      "qwen2_moe", {"qwen2_moe"}, {"Qwen2MoeForCausalLM"}, &parseQwen2Moe, &buildQwen2Moe};
  return family;
}

} // namespace kiln::compiler
