#include "compiler/models/family_config.h"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {
namespace {

Status readWindow(const ConfigFields &fields, int64_t &window) {
  window = 0;
  if (!fields.has("sliding_window"))
    return okStatus();
  return fields.readPositiveInt("sliding_window", window);
}

// `layer_types` when given: one "full_attention" / "sliding_attention" per layer (an error naming
// the field otherwise); empty when absent.
Status readLayerTypes(const ConfigFields &fields, int64_t numLayers,
                      std::vector<std::string> &types) {
  types.clear();
  if (!fields.has("layer_types"))
    return okStatus();
  KILN_RETURN_IF_ERROR(fields.readStrings("layer_types", types));
  if (static_cast<int64_t>(types.size()) != numLayers)
    return fields.error("layer_types", "lists " + std::to_string(types.size()) +
                                           " attention kinds for num_hidden_layers " +
                                           std::to_string(numLayers));
  for (const std::string &type : types)
    if (type != "full_attention" && type != "sliding_attention")
      return fields.error("layer_types", "holds '" + type +
                                             "'; kiln supports full_attention and "
                                             "sliding_attention");
  return okStatus();
}

} // namespace

Status readSlidingWindowAllLayers(const ConfigFields &fields, HfModelConfig &config) {
  int64_t window = 0;
  KILN_RETURN_IF_ERROR(readWindow(fields, window));
  config.slidingWindows.assign(window > 0 ? config.numLayers : 0, window);
  return okStatus();
}

Status readQwenLayerWindows(const ConfigFields &fields, HfModelConfig &config) {
  bool useSlidingWindow = false;
  KILN_RETURN_IF_ERROR(fields.readBool("use_sliding_window", useSlidingWindow));
  int64_t window = 4096; // transformers' default when use_sliding_window is set without one
  if (useSlidingWindow && fields.has("sliding_window"))
    KILN_RETURN_IF_ERROR(readWindow(fields, window));
  if (!useSlidingWindow)
    window = 0;
  config.slidingWindows.clear();
  std::vector<std::string> types;
  KILN_RETURN_IF_ERROR(readLayerTypes(fields, config.numLayers, types));
  if (!types.empty()) {
    const bool anySliding =
        std::find(types.begin(), types.end(), "sliding_attention") != types.end();
    // transformers drops sliding_window unless use_sliding_window is set: then a
    // "sliding_attention" layer attends fully too.
    if (!anySliding || window == 0)
      return okStatus();
    for (const std::string &type : types)
      config.slidingWindows.push_back(type == "sliding_attention" ? window : 0);
    return okStatus();
  }
  if (window == 0)
    return okStatus();
  int64_t fullLayers = 28; // transformers' default max_window_layers
  KILN_RETURN_IF_ERROR(fields.readInt("max_window_layers", fullLayers));
  for (int64_t i = 0; i < config.numLayers; ++i)
    config.slidingWindows.push_back(i >= fullLayers ? window : 0);
  return okStatus();
}

Status readGemmaLayerWindows(const ConfigFields &fields, int64_t pattern, HfModelConfig &config) {
  int64_t window = 4096;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("sliding_window", window));
  std::vector<std::string> types;
  KILN_RETURN_IF_ERROR(readLayerTypes(fields, config.numLayers, types));
  if (types.empty())
    for (int64_t i = 0; i < config.numLayers; ++i)
      types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
  config.slidingWindows.clear();
  for (const std::string &type : types)
    config.slidingWindows.push_back(type == "sliding_attention" ? window : 0);
  return okStatus();
}

Status readSoftcap(const ConfigFields &fields, const std::string &key, double fallback,
                   double &out) {
  const std::vector<std::string> keys = fields.keys();
  const bool present = std::find(keys.begin(), keys.end(), key) != keys.end();
  out = present ? 0.0 : fallback; // present but without a value: null
  KILN_RETURN_IF_ERROR(fields.readDouble(key, out));
  if (out < 0)
    return fields.error(key, "must be positive or null, got " + fields.dump(key));
  return okStatus();
}

Status readGemmaCommon(const ConfigFields &fields, HfModelConfig &config) {
  std::string activation = "gelu_pytorch_tanh";
  KILN_RETURN_IF_ERROR(fields.readString("hidden_activation", activation));
  if (activation != "gelu_pytorch_tanh")
    return unimplemented(fields.source() + ": field 'hidden_activation' is '" + activation +
                         "'; Gemma supports hidden_activation: gelu_pytorch_tanh");
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
  return okStatus();
}

Status requireSiluActivation(const ConfigFields &fields) {
  std::string act = "silu";
  KILN_RETURN_IF_ERROR(fields.readString("hidden_act", act));
  if (act != "silu")
    return unimplemented(fields.source() + ": field 'hidden_act' is '" + act +
                         "'; this family supports hidden_act: silu");
  return okStatus();
}

Status readQwenExperts(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_experts", config.numExperts, true));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_experts_per_tok", config.expertsPerToken, true));
  if (config.expertsPerToken > config.numExperts)
    return fields.error("num_experts_per_tok", "(" + std::to_string(config.expertsPerToken) +
                                                   ") must be at most num_experts (" +
                                                   std::to_string(config.numExperts) + ")");
  KILN_RETURN_IF_ERROR(
      fields.readPositiveInt("moe_intermediate_size", config.expertIntermediate, true));
  config.renormalizeExperts = false; // Qwen2MoeConfig / Qwen3MoeConfig default
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
  return okStatus();
}

} // namespace kiln::compiler
