// Qwen2 / Qwen2.5 (Qwen2ForCausalLM): Llama with biases on the q/k/v projections (none on o),
// tied embeddings in the small models, yarn rope scaling for long context, and per-layer sliding
// windows when `use_sliding_window` is set.
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseQwen2(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.embeds = config.embeds || config.architecture == "Qwen2Model"; // gte-Qwen2, ...
  config.qkvBias = true;
  config.oBias = false;
  return readQwenLayerWindows(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildQwen2(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &qwen2Family() {
  static const ModelFamily family{
      "qwen2", {"qwen2"}, {"Qwen2ForCausalLM", "Qwen2Model"}, &parseQwen2, &buildQwen2};
  return family;
}

} // namespace kiln::compiler
