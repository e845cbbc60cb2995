// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3 (per-head q/k norms) whose MLPs are mixtures of
// experts: a router linear (mlp.gate) over num_experts experts of moe_intermediate_size, the top
// num_experts_per_tok by softmax probability, renormalized to sum 1 when norm_topk_prob; layers
// listed in mlp_only_layers, or whose index + 1 is not a multiple of decoder_sparse_step, keep a
// dense MLP of intermediate_size (transformers' Qwen3MoeDecoderLayer rule).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

Status parseQwen3Moe(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.qkvBias = config.oBias = config.attentionBias;
  config.qkNorm = true;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_experts", config.numExperts, true));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_experts_per_tok", config.expertsPerToken, true));
  if (config.expertsPerToken > config.numExperts)
    return fields.error("num_experts_per_tok", "(" + std::to_string(config.expertsPerToken) +
                                                   ") must be at most num_experts (" +
                                                   std::to_string(config.numExperts) + ")");
  KILN_RETURN_IF_ERROR(
      fields.readPositiveInt("moe_intermediate_size", config.expertIntermediate, true));
  config.renormalizeExperts = false; // Qwen3MoeConfig's default
  KILN_RETURN_IF_ERROR(fields.readBool("norm_topk_prob", config.renormalizeExperts));
  int64_t sparseStep = 1;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("decoder_sparse_step", sparseStep));
  std::vector<double> mlpOnly;
  KILN_RETURN_IF_ERROR(fields.readDoubles("mlp_only_layers", mlpOnly));
  config.denseMlpLayers.assign(config.numLayers, false);
  for (int64_t layer = 0; layer < config.numLayers; ++layer)
    config.denseMlpLayers[layer] =
        std::find(mlpOnly.begin(), mlpOnly.end(), double(layer)) != mlpOnly.end() ||
        (layer + 1) % sparseStep != 0;
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
