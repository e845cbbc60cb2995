// Gemma 2 (Gemma2ForCausalLM): the decoder with GeGLU (gelu_pytorch_tanh) MLPs, RMSNorms that
// scale by (1 + weight), four norms a layer (the attention and MLP outputs are normed before they
// join the residual stream), embeddings scaled by sqrt(hidden_size) in the activations' dtype,
// attention scaled by query_pre_attn_scalar^-0.5 with its scores soft-capped (tanh(s / c) * c),
// the final logits soft-capped likewise, sliding-window attention on alternating layers, tied
// embeddings. Defaults are transformers' Gemma2Config's where config.json leaves a key out.
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parseGemma2(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(readGemmaCommon(fields, config));
  KILN_RETURN_IF_ERROR(
      readSoftcap(fields, "attn_logit_softcapping", 50.0, config.attnLogitSoftcap));
  KILN_RETURN_IF_ERROR(
      readSoftcap(fields, "final_logit_softcapping", 30.0, config.finalLogitSoftcap));
  return readGemmaLayerWindows(fields, /*pattern=*/2, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildGemma2(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildDecoder(context, config, options);
}

} // namespace

const ModelFamily &gemma2Family() {
  static const ModelFamily family{
      "gemma2", {"gemma2"}, {"Gemma2ForCausalLM"}, &parseGemma2, &buildGemma2};
  return family;
}

} // namespace kiln::compiler
