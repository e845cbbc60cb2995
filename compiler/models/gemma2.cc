// Gemma 2 (Gemma2ForCausalLM): the decoder with GeGLU (gelu_pytorch_tanh) MLPs, RMSNorms that
// scale by (1 + weight), four norms a layer (the attention and MLP outputs are normed before they
// join the residual stream), embeddings scaled by sqrt(hidden_size) in the activations' dtype,
// attention scaled by query_pre_attn_scalar^-0.5 with its scores soft-capped (tanh(s / c) * c),
// the final logits soft-capped likewise, sliding-window attention on alternating layers, tied
// embeddings. Defaults are transformers' Gemma2Config's where config.json leaves a key out.
#include "compiler/models/decoder.h"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {
namespace {

// A soft-capping field: transformers' default when absent, none when null.
Status readSoftcap(const ConfigFields &fields, const std::string &key, double fallback,
                   double &out) {
  const std::vector<std::string> keys = fields.keys();
  const bool present = std::find(keys.begin(), keys.end(), key) != keys.end();
  out = present ? 0.0 : fallback; // present but not has(): null
  KILN_RETURN_IF_ERROR(fields.readDouble(key, out));
  if (out < 0)
    return fields.error(key, "must be positive or null, got " + fields.dump(key));
  return okStatus();
}

// Gemma2Config's attention kinds: `layer_types`, else sliding on even layers (0, 2, ...).
Status readGemmaLayerWindows(const ConfigFields &fields, HfModelConfig &config) {
  int64_t window = 4096;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("sliding_window", window));
  std::vector<std::string> types;
  KILN_RETURN_IF_ERROR(fields.readStrings("layer_types", types));
  if (types.empty())
    for (int64_t i = 0; i < config.numLayers; ++i)
      types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  if (static_cast<int64_t>(types.size()) != config.numLayers)
    return fields.error("layer_types", "lists " + std::to_string(types.size()) +
                                           " attention kinds for num_hidden_layers " +
                                           std::to_string(config.numLayers));
  config.slidingWindows.clear();
  for (const std::string &type : types) {
    if (type != "full_attention" && type != "sliding_attention")
      return fields.error("layer_types", "holds '" + type +
                                             "'; kiln supports full_attention and "
                                             "sliding_attention");
    config.slidingWindows.push_back(type == "sliding_attention" ? window : 0);
  }
  return okStatus();
}

Status parseGemma2(const ConfigFields &fields, HfModelConfig &config) {
  std::string activation = "gelu_pytorch_tanh";
  KILN_RETURN_IF_ERROR(fields.readString("hidden_activation", activation));
  if (activation != "gelu_pytorch_tanh")
    return unimplemented(fields.source() + ": field 'hidden_activation' is '" + activation +
                         "'; Gemma 2 supports hidden_activation: gelu_pytorch_tanh");
  config.geluTanhMlp = config.normPlusOne = config.sandwichNorms = true;
  config.scaleEmbeddings = true;
  if (!fields.has("tie_word_embeddings"))
    config.tieWordEmbeddings = true;
  config.qkvBias = config.oBias = config.attentionBias;
  double queryPreAttnScalar = 256;
  KILN_RETURN_IF_ERROR(fields.readDouble("query_pre_attn_scalar", queryPreAttnScalar));
  if (!(queryPreAttnScalar > 0))
    return fields.error("query_pre_attn_scalar", "must be positive");
  config.attentionScale = std::pow(queryPreAttnScalar, -0.5);
  KILN_RETURN_IF_ERROR(
      readSoftcap(fields, "attn_logit_softcapping", 50.0, config.attnLogitSoftcap));
  KILN_RETURN_IF_ERROR(
      readSoftcap(fields, "final_logit_softcapping", 30.0, config.finalLogitSoftcap));
  return readGemmaLayerWindows(fields, config);
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
