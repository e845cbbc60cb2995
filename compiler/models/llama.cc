// Llama 1/2/3 (LlamaForCausalLM): GQA, explicit head_dim, llama3 rope scaling, tied embeddings,
// `attention_bias` on q/k/v/o and `mlp_bias` on gate/up/down.
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseLlama(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  config.qkvBias = config.oBias = config.attentionBias;
  return okStatus();
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildLlama(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &llamaFamily() {
  static const ModelFamily family{
      "llama", {"llama"}, {"LlamaForCausalLM"}, &parseLlama, &buildLlama};
  return family;
}

} // namespace kiln::compiler
