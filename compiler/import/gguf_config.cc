#include "compiler/import/gguf_config.h"

#include "compiler/import/gguf_dequant.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace kiln::compiler {
namespace {

using Json = nlohmann::ordered_json;

// Reads `<arch>.<key>` metadata, naming the full key in errors.
class ArchKeys {
public:
  ArchKeys(const GgufFile &gguf, std::string arch) : gguf_(gguf), prefix_(std::move(arch) + ".") {}
  std::string key(const std::string &name) const { return prefix_ + name; }
  bool has(const std::string &name) const { return gguf_.find(key(name)) != nullptr; }
  Result<int64_t> positiveInt(const std::string &name) const {
    KILN_ASSIGN_OR_RETURN(int64_t value, gguf_.getInt(key(name)));
    if (value <= 0)
      return invalidArgument(gguf_.path() + ": metadata key '" + key(name) +
                             "' must be positive, got " + std::to_string(value));
    return value;
  }
  int64_t intOr(const std::string &name, int64_t fallback) const {
    return gguf_.getIntOr(key(name), fallback);
  }
  double floatOr(const std::string &name, double fallback) const {
    return gguf_.getFloatOr(key(name), fallback);
  }
  std::string stringOr(const std::string &name, const std::string &fallback) const {
    return gguf_.getStringOr(key(name), fallback);
  }

private:
  const GgufFile &gguf_;
  std::string prefix_;
};

// A 1-D F32/F16 tensor's values (Phi-3's rope factor tensors).
Result<std::vector<double>> vectorTensor(const GgufFile &gguf, const std::string &name) {
  const GgufTensor *tensor = gguf.tensor(name);
  if (tensor == nullptr)
    return notFound(gguf.path() + ": tensor '" + name + "' is missing");
  std::vector<float> values(static_cast<size_t>(tensor->numElements()));
  KILN_RETURN_IF_ERROR(
      dequantizeGgml(tensor->type, gguf.tensorBytes(*tensor), tensor->numElements(), values.data())
          .withContext("tensor '" + name + "'"));
  return std::vector<double>(values.begin(), values.end());
}

// rope_scaling from `<arch>.rope.scaling.*` (and the older `<arch>.rope.scale_linear`); Phi-3's
// longrope factors are the tensors rope_factors_long/short.weight. nullopt: unscaled.
Result<Json> ropeScaling(const GgufFile &gguf, const ArchKeys &keys) {
  std::string type = keys.stringOr("rope.scaling.type", "");
  double factor = keys.floatOr("rope.scaling.factor", 0.0);
  if (type.empty() && keys.has("rope.scale_linear")) {
    type = "linear";
    factor = keys.floatOr("rope.scale_linear", 1.0);
  }
  bool longrope = gguf.tensor("rope_factors_long.weight") != nullptr;
  if (longrope)
    type = "longrope";
  if (gguf.tensor("rope_freqs.weight") != nullptr)
    return unimplemented(gguf.path() +
                         ": tensor 'rope_freqs.weight' (llama.cpp's per-frequency "
                         "rope factors, as Llama 3.1 files carry) is not read by kiln yet; "
                         "compile the Hugging Face checkpoint, whose rope_scaling kiln reads");
  if (type.empty() || type == "none")
    return Json();
  Json scaling;
  scaling["rope_type"] = type;
  if (type == "linear" || type == "yarn") {
    if (!(factor > 0.0))
      return invalidArgument(gguf.path() + ": metadata key '" + keys.key("rope.scaling.factor") +
                             "' must be positive for rope scaling type '" + type + "'");
    scaling["factor"] = factor;
    if (type == "yarn" && keys.has("rope.scaling.original_context_length"))
      scaling["original_max_position_embeddings"] =
          keys.intOr("rope.scaling.original_context_length", 0);
    return scaling;
  }
  if (type == "longrope") {
    KILN_ASSIGN_OR_RETURN(std::vector<double> longFactor,
                          vectorTensor(gguf, "rope_factors_long.weight"));
    KILN_ASSIGN_OR_RETURN(std::vector<double> shortFactor,
                          vectorTensor(gguf, "rope_factors_short.weight"));
    scaling["long_factor"] = longFactor;
    scaling["short_factor"] = shortFactor;
    return scaling;
  }
  return unimplemented(gguf.path() + ": metadata key '" + keys.key("rope.scaling.type") + "' is '" +
                       type + "'; kiln reads none, linear, yarn and longrope");
}

// bos / eos (+ eot, eom) / pad ids from the tokenizer metadata.
void specialTokenIds(const GgufFile &gguf, Json &config, Json &generation) {
  int64_t bos = gguf.getIntOr("tokenizer.ggml.bos_token_id", -1);
  std::vector<int64_t> eos;
  for (const char *key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    int64_t id = gguf.getIntOr(key, -1);
    if (id >= 0 && std::find(eos.begin(), eos.end(), id) == eos.end())
      eos.push_back(id);
  }
  int64_t pad = gguf.getIntOr("tokenizer.ggml.padding_token_id", -1);
  if (bos >= 0) {
    config["bos_token_id"] = bos;
    generation["bos_token_id"] = bos;
  }
  if (!eos.empty()) {
    config["eos_token_id"] = eos.size() == 1 ? Json(eos[0]) : Json(eos);
    generation["eos_token_id"] = eos.size() == 1 ? Json(eos[0]) : Json(eos);
  }
  if (pad >= 0)
    config["pad_token_id"] = pad;
}

Result<int64_t> vocabSize(const GgufFile &gguf, const ArchKeys &keys) {
  if (keys.has("vocab_size"))
    return keys.positiveInt("vocab_size");
  if (const GgufValue *tokens = gguf.find("tokenizer.ggml.tokens"); tokens && tokens->isArray())
    return static_cast<int64_t>(tokens->arraySize());
  if (const GgufTensor *embed = gguf.tensor("token_embd.weight"); embed && embed->dims.size() == 2)
    return embed->dims[1];
  return invalidArgument(gguf.path() + ": the vocabulary size is unknown (no '" +
                         keys.key("vocab_size") + "', tokenizer.ggml.tokens or token_embd.weight)");
}

} // namespace

const std::vector<GgufArchitecture> &ggufArchitectures() {
  static const std::vector<GgufArchitecture> kArchitectures = {
      {"llama", "llama", "LlamaForCausalLM", true},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", false},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", false},
      {"phi3", "phi3", "Phi3ForCausalLM", false},
  };
  return kArchitectures;
}

std::string supportedGgufArchitectures() {
  std::string names;
  for (const GgufArchitecture &arch : ggufArchitectures())
    names += (names.empty() ? "" : ", ") + std::string(arch.name);
  return names;
}

Result<const GgufArchitecture *> ggufArchitecture(const GgufFile &gguf) {
  KILN_ASSIGN_OR_RETURN(std::string name, gguf.getString("general.architecture"));
  for (const GgufArchitecture &arch : ggufArchitectures())
    if (name == arch.name)
      return &arch;
  return unimplemented(gguf.path() + ": general.architecture '" + name +
                       "' is not supported; kiln compiles GGUF architectures " +
                       supportedGgufArchitectures());
}

Result<GgufHfConfig> ggufHfConfig(const GgufFile &gguf) {
  KILN_ASSIGN_OR_RETURN(const GgufArchitecture *arch, ggufArchitecture(gguf));
  ArchKeys keys(gguf, arch->name);
  Json config;
  config["architectures"] = Json::array({arch->hfClass});
  config["model_type"] = arch->modelType;
  KILN_ASSIGN_OR_RETURN(int64_t hidden, keys.positiveInt("embedding_length"));
  KILN_ASSIGN_OR_RETURN(int64_t layers, keys.positiveInt("block_count"));
  KILN_ASSIGN_OR_RETURN(int64_t heads, keys.positiveInt("attention.head_count"));
  KILN_ASSIGN_OR_RETURN(int64_t ffn, keys.positiveInt("feed_forward_length"));
  KILN_ASSIGN_OR_RETURN(int64_t vocab, vocabSize(gguf, keys));
  int64_t kvHeads = heads;
  if (keys.has("attention.head_count_kv")) {
    KILN_ASSIGN_OR_RETURN(kvHeads, keys.positiveInt("attention.head_count_kv"));
  }
  int64_t headDim = hidden / heads;
  if (keys.has("attention.key_length")) {
    KILN_ASSIGN_OR_RETURN(headDim, keys.positiveInt("attention.key_length"));
  }
  config["hidden_size"] = hidden;
  config["intermediate_size"] = ffn;
  config["num_hidden_layers"] = layers;
  config["num_attention_heads"] = heads;
  config["num_key_value_heads"] = kvHeads;
  config["head_dim"] = headDim;
  config["vocab_size"] = vocab;
  config["max_position_embeddings"] = keys.intOr("context_length", 2048);
  config["rms_norm_eps"] = keys.floatOr("attention.layer_norm_rms_epsilon", 1e-6);
  config["rope_theta"] = keys.floatOr("rope.freq_base", 10000.0);
  int64_t ropeDim = keys.intOr("rope.dimension_count", headDim);
  if (ropeDim != headDim) {
    if (std::string(arch->name) != "phi3")
      return unimplemented(gguf.path() + ": metadata key '" + keys.key("rope.dimension_count") +
                           "' is " + std::to_string(ropeDim) + ", not the head dimension " +
                           std::to_string(headDim) + "; partial rotary is not a " + arch->name +
                           " model");
    config["partial_rotary_factor"] = static_cast<double>(ropeDim) / static_cast<double>(headDim);
  }
  KILN_ASSIGN_OR_RETURN(Json scaling, ropeScaling(gguf, keys));
  if (!scaling.is_null()) {
    if (keys.has("rope.scaling.original_context_length"))
      config["original_max_position_embeddings"] =
          keys.intOr("rope.scaling.original_context_length", 0);
    config["rope_scaling"] = scaling;
  }
  if (keys.has("attention.sliding_window") && keys.intOr("attention.sliding_window", 0) > 0)
    config["sliding_window"] = keys.intOr("attention.sliding_window", 0);
  else if (std::string(arch->name) == "phi3")
    config["sliding_window"] = nullptr; // transformers' Phi3Config default is 2047; GGUF says none
  config["tie_word_embeddings"] = gguf.tensor("output.weight") == nullptr;
  config["torch_dtype"] = "float32";
  Json generation = Json::object();
  specialTokenIds(gguf, config, generation);
  return GgufHfConfig{config.dump(2), generation.dump(2)};
}

} // namespace kiln::compiler
