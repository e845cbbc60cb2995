// Phi-3 / Phi-3.5 (Phi3ForCausalLM): Llama whose checkpoint stores q/k/v as one `qkv_proj` and
// gate/up as one `gate_up_proj` (the graph reads row slices of them), a sliding window on every
// layer when `sliding_window` is set (Phi-3-mini-4k: 2047), and longrope scaling in the 128k
// models (short/long factors switching at original_max_position_embeddings).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

namespace kiln::compiler {
namespace {

Status parsePhi3(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(requireSiluActivation(fields));
  return readSlidingWindowAllLayers(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildPhi3(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  DecoderLayout layout;
  layout.fusedQkv = true;
  layout.fusedGateUp = true;
  return buildDecoder(context, config, options, layout);
}

} // namespace

const ModelFamily &phi3Family() {
  // Phi3Config reads the rope types "su" and "yarn" of early Phi-3 releases as longrope.
  static const ModelFamily family{
      "phi3",     {"phi3"},   {"Phi3ForCausalLM"},
      &parsePhi3, &buildPhi3, {{"su", "longrope"}, {"yarn", "longrope"}}};
  return family;
}

} // namespace kiln::compiler
