// Qwen3 (Qwen3ForCausalLM): Llama with a per-head RMSNorm of q and k (q_norm, k_norm over
// head_dim) before rope, an explicit head_dim, `attention_bias` on q/k/v/o, and Qwen2's per-layer
// sliding windows.
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseQwen3(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  // Qwen3Model: an embedding model (so are decoder checkpoints with sentence-transformers files,
  // compiler/driver/compile.cc).
  config.embeds = config.embeds || config.architecture == "Qwen3Model";
  config.qkvBias = config.oBias = config.attentionBias;
  config.qkNorm = true;
  return readQwenLayerWindows(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildQwen3(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &qwen3Family() {
  static const ModelFamily family{
      "qwen3", {"qwen3"}, {"Qwen3ForCausalLM", "Qwen3Model"}, &parseQwen3, &buildQwen3};
  return family;
}

} // namespace kiln::compiler
