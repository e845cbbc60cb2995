// Mixtral (MixtralForCausalLM): Mistral whose MLPs are mixtures of experts: a router linear
// (block_sparse_moe.gate) over num_local_experts experts, the top num_experts_per_tok by softmax
// probability renormalized to sum 1, each expert a SiLU-gated MLP of intermediate_size
// (experts.N.w1 gate, w3 up, w2 down, as the published checkpoints store them).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseMixtral(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_local_experts", config.numExperts, true));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_experts_per_tok", config.expertsPerToken, true));
  if (config.expertsPerToken > config.numExperts)
    return fields.error("num_experts_per_tok", "(" + std::to_string(config.expertsPerToken) +
                                                   ") must be at most num_local_experts (" +
                                                   std::to_string(config.numExperts) + ")");
  config.expertIntermediate = config.intermediateSize;
  config.renormalizeExperts = true;
  return readSlidingWindowAllLayers(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildMixtral(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  DecoderLayout layout;
  layout.moeBlock = "block_sparse_moe";
  layout.expertGate = "experts.{e}.w1.weight";
  layout.expertUp = "experts.{e}.w3.weight";
  layout.expertDown = "experts.{e}.w2.weight";
  return buildDecoder(context, config, options, layout);
}

} // namespace

const ModelFamily &mixtralFamily() {
  static const ModelFamily family{
      "mixtral", {"mixtral"}, {"MixtralForCausalLM"}, &parseMixtral, &buildMixtral};
  return family;
}

} // namespace kiln::compiler
