// Mistral (MistralForCausalLM): Llama with sliding-window attention on every layer when
// `sliding_window` is set (Mistral-7B-v0.1: 4096; v0.2 and later: null, full attention) and an
// explicit head_dim (Mistral-Nemo: 128 with hidden 5120).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseMistral(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.embeds = config.embeds || config.architecture == "MistralModel"; // e5-mistral, ...
  return readSlidingWindowAllLayers(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildMistral(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &mistralFamily() {
  static const ModelFamily family{
      "mistral", {"mistral"}, {"MistralForCausalLM", "MistralModel"}, &parseMistral, &buildMistral};
  return family;
}

} // namespace kiln::compiler
