// Gemma 3 text (Gemma3ForCausalLM, model_type gemma3_text) and the text tower of
// Gemma3ForConditionalGeneration (model_type gemma3: the keys under text_config, the weights
// under language_model.model. as published, or model.language_model. as transformers 5 saves;
// the vision tower's tensors are not read). Gemma 2's blocks (GeGLU, (1 + w) norms four a layer,
// scaled embeddings, query_pre_attn_scalar) plus per-head q/k norms (also 1 + w), no
// soft-capping unless the config sets it, sliding windows on all but every
// sliding_window_pattern-th layer (default 6: five local to one global), and RoPE per layer kind:
// global layers rope_theta with rope_scaling, local ones rope_local_base_freq unscaled.
// Gemma3TextConfig's defaults fill the keys a config.json leaves out (published text_configs hold
// only what differs from them).
#include "compiler/models/decoder.h"
#include "compiler/models/family_config.h"

#include <nlohmann/json.hpp>

namespace kiln::compiler {
namespace {

using Json = nlohmann::ordered_json;

// transformers 5.24's Gemma3TextConfig defaults.
const Json &textDefaults() {
  static const Json defaults = {{"vocab_size", 262208},
                                {"hidden_size", 2304},
                                {"intermediate_size", 9216},
                                {"num_hidden_layers", 26},
                                {"num_attention_heads", 8},
                                {"num_key_value_heads", 4},
                                {"head_dim", 256},
                                {"hidden_activation", "gelu_pytorch_tanh"},
                                {"max_position_embeddings", 131072},
                                {"rms_norm_eps", 1e-6},
                                {"pad_token_id", 0},
                                {"eos_token_id", 1},
                                {"bos_token_id", 2},
                                {"tie_word_embeddings", true},
                                {"attention_bias", false},
                                {"query_pre_attn_scalar", 256},
                                {"sliding_window", 4096},
                                {"rope_theta", 1000000.0},
                                {"rope_local_base_freq", 10000.0}};
  return defaults;
}

// transformers 5's rope_parameters per layer kind -> the published spelling: rope_theta and
// rope_scaling for full_attention, rope_local_base_freq for sliding_attention.
Status flattenRopeParameters(Json &config, const std::string &source) {
  auto params = config.find("rope_parameters");
  if (params == config.end() || !params->is_object() || !params->contains("full_attention"))
    return okStatus();
  for (const char *kind : {"full_attention", "sliding_attention"}) {
    if (!params->contains(kind))
      continue;
    Json rope = (*params)[kind];
    if (!rope.is_object())
      return invalidArgument(source + ": field 'rope_parameters." + kind + "' must be an object");
    if (rope.contains("rope_theta"))
      config[kind == std::string("full_attention") ? "rope_theta" : "rope_local_base_freq"] =
          rope["rope_theta"];
    rope.erase("rope_theta");
    const bool scaled = rope.value("rope_type", "default") != "default";
    if (kind == std::string("sliding_attention") && scaled)
      return unimplemented(source + ": field 'rope_parameters.sliding_attention.rope_type' is '" +
                           rope.value("rope_type", "") +
                           "'; kiln rotates Gemma 3's local layers unscaled");
    if (kind == std::string("full_attention") && scaled)
      config["rope_scaling"] = rope;
  }
  config.erase("rope_parameters");
  return okStatus();
}

Result<std::string> normalizeGemma3(const std::string &text, const std::string &source) {
  Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object())
    return invalidArgument(source + ": not a JSON object");
  if (config.value("model_type", "") == "gemma3") { // the multimodal wrapper: its text tower
    auto textConfig = config.find("text_config");
    if (textConfig == config.end() || !textConfig->is_object())
      return invalidArgument(source + ": field 'text_config' must be an object for model_type "
                                      "gemma3");
    Json flat = *textConfig;
    for (const char *key : {"architectures", "bos_token_id", "eos_token_id", "pad_token_id",
                            "tie_word_embeddings", "torch_dtype", "dtype"})
      if (config.contains(key) && !flat.contains(key))
        flat[key] = config[key];
    flat["architectures"] = config.value("architectures", Json::array());
    flat["model_type"] = "gemma3";
    config = std::move(flat);
  }
  for (const auto &[key, value] : textDefaults().items())
    if (!config.contains(key))
      config[key] = value;
  KILN_RETURN_IF_ERROR(flattenRopeParameters(config, source));
  return config.dump();
}

Status parseGemma3(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(readGemmaCommon(fields, config));
  config.qkNorm = true;
  KILN_RETURN_IF_ERROR(readSoftcap(fields, "attn_logit_softcapping", 0, config.attnLogitSoftcap));
  KILN_RETURN_IF_ERROR(readSoftcap(fields, "final_logit_softcapping", 0, config.finalLogitSoftcap));
  KILN_RETURN_IF_ERROR(fields.readDouble("rope_local_base_freq", config.localRopeTheta));
  if (!(config.localRopeTheta > 0))
    return fields.error("rope_local_base_freq", "must be positive");
  int64_t pattern = 6;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("sliding_window_pattern", pattern));
  return readGemmaLayerWindows(fields, pattern, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildGemma3(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  DecoderLayout layout;
  if (config.architecture == "Gemma3ForConditionalGeneration") {
    const bool published =
        options.hasTensor && options.hasTensor("language_model.model.embed_tokens.weight");
    const std::string prefix = published ? "language_model.model." : "model.language_model.";
    layout.embedTokens = prefix + "embed_tokens.weight";
    layout.layerPrefix = prefix + "layers.";
    layout.finalNorm = prefix + "norm.weight";
    layout.lmHead = published ? "language_model.lm_head.weight" : "lm_head.weight";
  }
  return buildDecoder(context, config, options, layout);
}

} // namespace

const ModelFamily &gemma3Family() {
  static const ModelFamily family{"gemma3",
                                  {"gemma3_text", "gemma3"},
                                  {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
                                  &parseGemma3,
                                  &buildGemma3,
                                  {},
                                  &normalizeGemma3};
  return family;
}

} // namespace kiln::compiler
