#include "compiler/import/hf_config.h"

#include "runtime/base/file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <nlohmann/json.hpp>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

// Reads typed fields of one JSON object; every error names the file and the dotted field path.
class FieldReader {
public:
  FieldReader(const Json &object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  std::string field(const std::string &key) const { return prefix_ + key; }

  Status error(const std::string &key, const std::string &what) const {
    return invalidArgument(source_ + ": field '" + field(key) + "' " + what);
  }

  // Absent and null are the same: transformers writes null for "use the default".
  const Json *find(const std::string &key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null())
      return nullptr;
    return &*it;
  }

  Status readInt(const std::string &key, int64_t &out, bool required = false) const {
    const Json *value = find(key);
    if (!value)
      return required ? error(key, "is required but missing") : okStatus();
    return toInt(key, *value, out);
  }

  Status readPositiveInt(const std::string &key, int64_t &out, bool required = false) const {
    const Json *value = find(key);
    KILN_RETURN_IF_ERROR(readInt(key, out, required));
    if (value && out <= 0)
      return error(key, "must be positive, got " + std::to_string(out));
    return okStatus();
  }

  Status readDouble(const std::string &key, double &out, bool required = false) const {
    const Json *value = find(key);
    if (!value)
      return required ? error(key, "is required but missing") : okStatus();
    if (!value->is_number())
      return error(key, "must be a number, got " + value->dump());
    out = value->get<double>();
    if (!std::isfinite(out))
      return error(key, "must be finite");
    return okStatus();
  }

  Status readBool(const std::string &key, bool &out) const {
    const Json *value = find(key);
    if (!value)
      return okStatus();
    if (!value->is_boolean())
      return error(key, "must be true or false, got " + value->dump());
    out = value->get<bool>();
    return okStatus();
  }

  Status readString(const std::string &key, std::string &out, bool required = false) const {
    const Json *value = find(key);
    if (!value)
      return required ? error(key, "is required but missing") : okStatus();
    if (!value->is_string())
      return error(key, "must be a string, got " + value->dump());
    out = value->get<std::string>();
    return okStatus();
  }

  // A token id field that may be one integer or a list of them (eos_token_id in Llama 3).
  Status readTokenIds(const std::string &key, std::vector<int32_t> &out) const {
    const Json *value = find(key);
    if (!value)
      return okStatus();
    if (!value->is_array())
      return appendTokenId(key, *value, out);
    for (const Json &element : *value)
      KILN_RETURN_IF_ERROR(appendTokenId(key, element, out));
    return okStatus();
  }

private:
  Status toInt(const std::string &key, const Json &value, int64_t &out) const {
    if (!value.is_number_integer())
      return error(key, "must be an integer, got " + value.dump());
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return error(key, "is out of range: " + value.dump());
    out = value.get<int64_t>();
    return okStatus();
  }

  Status appendTokenId(const std::string &key, const Json &value, std::vector<int32_t> &out) const {
    int64_t id = 0;
    KILN_RETURN_IF_ERROR(toInt(key, value, id));
    // Early Llama conversions write pad_token_id: -1 for "none".
    if (id < 0)
      return okStatus();
    if (id > std::numeric_limits<int32_t>::max())
      return error(key, "must hold token ids below 2^31, got " + std::to_string(id));
    out.push_back(static_cast<int32_t>(id));
    return okStatus();
  }

  const Json &object_;
  std::string source_;
  std::string prefix_;
};

Result<Json> parseObject(const std::string &text, const std::string &source) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return invalidArgument(source + ": not valid JSON");
  if (!json.is_object())
    return invalidArgument(source + ": expected a JSON object at the top level");
  return json;
}

// transformers accepts both `rope_type` and the legacy `type` key; "default" means no scaling.
Status parseRopeScaling(const Json &json, const std::string &source, const std::string &key,
                        HfModelConfig &config) {
  FieldReader top(json, source);
  const Json *scaling = top.find(key);
  if (!scaling)
    return okStatus();
  if (!scaling->is_object())
    return top.error(key, "must be an object or null, got " + scaling->dump());
  FieldReader reader(*scaling, source, key + ".");
  std::string type;
  KILN_RETURN_IF_ERROR(reader.readString("rope_type", type));
  if (type.empty())
    KILN_RETURN_IF_ERROR(reader.readString("type", type));
  if (type.empty() || type == "default")
    return okStatus();
  if (type != "llama3")
    return unimplemented(source + ": field '" + key + ".rope_type' is '" + type +
                         "'; kiln supports rope scaling types: default, llama3");
  RopeScaling rope;
  rope.type = type;
  KILN_RETURN_IF_ERROR(reader.readDouble("factor", rope.factor, /*required=*/true));
  KILN_RETURN_IF_ERROR(reader.readDouble("low_freq_factor", rope.lowFreqFactor, true));
  KILN_RETURN_IF_ERROR(reader.readDouble("high_freq_factor", rope.highFreqFactor, true));
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("original_max_position_embeddings",
                                              rope.originalMaxPositionEmbeddings, true));
  if (rope.factor <= 0)
    return reader.error("factor", "must be positive");
  if (rope.lowFreqFactor <= 0 || rope.highFreqFactor <= rope.lowFreqFactor)
    return reader.error("high_freq_factor",
                        "must be greater than low_freq_factor, and both positive");
  config.ropeScaling = rope;
  return okStatus();
}

Status checkSupported(const Json &json, const std::string &source) {
  FieldReader reader(json, source);
  std::string modelType;
  KILN_RETURN_IF_ERROR(reader.readString("model_type", modelType, /*required=*/true));
  if (modelType != "llama")
    return unimplemented(source + ": field 'model_type' is '" + modelType +
                         "'; kiln supports model_type: llama");
  if (reader.find("quantization_config"))
    return unimplemented(source + ": field 'quantization_config' is set; kiln compiles "
                                  "unquantized checkpoints only (remove it or use the "
                                  "unquantized model)");
  std::string hiddenAct = "silu";
  KILN_RETURN_IF_ERROR(reader.readString("hidden_act", hiddenAct));
  if (hiddenAct != "silu")
    return unimplemented(source + ": field 'hidden_act' is '" + hiddenAct +
                         "'; kiln supports hidden_act: silu");
  return okStatus();
}

Status readShape(const Json &json, const std::string &source, HfModelConfig &config) {
  FieldReader reader(json, source);
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("vocab_size", config.vocabSize, true));
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("hidden_size", config.hiddenSize, true));
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("intermediate_size", config.intermediateSize, true));
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("num_hidden_layers", config.numLayers, true));
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("num_attention_heads", config.numHeads, true));
  config.numKvHeads = config.numHeads;
  KILN_RETURN_IF_ERROR(reader.readPositiveInt("num_key_value_heads", config.numKvHeads));
  if (config.numHeads % config.numKvHeads != 0)
    return reader.error("num_attention_heads",
                        "(" + std::to_string(config.numHeads) +
                            ") must be a multiple of 'num_key_value_heads' (" +
                            std::to_string(config.numKvHeads) + ")");
  if (reader.find("head_dim")) {
    KILN_RETURN_IF_ERROR(reader.readPositiveInt("head_dim", config.headDim));
  } else {
    if (config.hiddenSize % config.numHeads != 0)
      return reader.error("hidden_size", "(" + std::to_string(config.hiddenSize) +
                                             ") must be a multiple of 'num_attention_heads' (" +
                                             std::to_string(config.numHeads) +
                                             ") when 'head_dim' is absent");
    config.headDim = config.hiddenSize / config.numHeads;
  }
  // rotate_half pairs element i with i + head_dim/2.
  if (config.headDim % 2 != 0)
    return reader.error("head_dim", "must be even for rotary embeddings, got " +
                                        std::to_string(config.headDim));
  KILN_RETURN_IF_ERROR(
      reader.readPositiveInt("max_position_embeddings", config.maxPositionEmbeddings));
  return okStatus();
}

Status readScalars(const Json &json, const std::string &source, HfModelConfig &config) {
  FieldReader reader(json, source);
  const Json *architectures = reader.find("architectures");
  if (architectures) {
    if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string())
      return reader.error("architectures", "must be a non-empty list of strings");
    config.architecture = (*architectures)[0].get<std::string>();
  }
  KILN_RETURN_IF_ERROR(reader.readDouble("rms_norm_eps", config.rmsNormEps));
  if (config.rmsNormEps <= 0)
    return reader.error("rms_norm_eps", "must be positive");
  KILN_RETURN_IF_ERROR(reader.readBool("tie_word_embeddings", config.tieWordEmbeddings));
  KILN_RETURN_IF_ERROR(reader.readBool("attention_bias", config.attentionBias));
  KILN_RETURN_IF_ERROR(reader.readBool("mlp_bias", config.mlpBias));
  KILN_RETURN_IF_ERROR(reader.readString("torch_dtype", config.torchDtype));
  if (config.torchDtype.empty()) // transformers >= 4.56 writes `dtype`
    KILN_RETURN_IF_ERROR(reader.readString("dtype", config.torchDtype));
  KILN_RETURN_IF_ERROR(reader.readDouble("rope_theta", config.ropeTheta));
  // transformers 5 folds rope_theta and the scaling type into `rope_parameters`.
  if (const Json *params = reader.find("rope_parameters")) {
    if (!params->is_object())
      return reader.error("rope_parameters", "must be an object, got " + params->dump());
    FieldReader paramReader(*params, source, "rope_parameters.");
    KILN_RETURN_IF_ERROR(paramReader.readDouble("rope_theta", config.ropeTheta));
    if (!reader.find("rope_scaling"))
      KILN_RETURN_IF_ERROR(parseRopeScaling(json, source, "rope_parameters", config));
  }
  if (config.ropeTheta <= 0)
    return reader.error("rope_theta", "must be positive");
  return parseRopeScaling(json, source, "rope_scaling", config);
}

void appendUnique(std::vector<int32_t> &ids, const std::vector<int32_t> &more) {
  for (int32_t id : more)
    if (std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(id);
}

// bos/pad: generation_config.json wins when it sets them; eos: union, config.json first.
Status readSpecialTokens(const Json &config, const Json *generation, const std::string &source,
                         const std::string &generationSource, HfModelConfig &out) {
  std::vector<int32_t> bos, pad, eos;
  FieldReader reader(config, source);
  KILN_RETURN_IF_ERROR(reader.readTokenIds("bos_token_id", bos));
  KILN_RETURN_IF_ERROR(reader.readTokenIds("pad_token_id", pad));
  KILN_RETURN_IF_ERROR(reader.readTokenIds("eos_token_id", eos));
  appendUnique(out.eosTokenIds, eos);
  if (generation) {
    FieldReader genReader(*generation, generationSource);
    std::vector<int32_t> genBos, genPad, genEos;
    KILN_RETURN_IF_ERROR(genReader.readTokenIds("bos_token_id", genBos));
    KILN_RETURN_IF_ERROR(genReader.readTokenIds("pad_token_id", genPad));
    KILN_RETURN_IF_ERROR(genReader.readTokenIds("eos_token_id", genEos));
    if (!genBos.empty())
      bos = genBos;
    if (!genPad.empty())
      pad = genPad;
    appendUnique(out.eosTokenIds, genEos);
  }
  out.bosTokenId = bos.empty() ? -1 : bos.front();
  out.padTokenId = pad.empty() ? -1 : pad.front();
  return okStatus();
}

std::string siblingName(const std::string &source, const std::string &name) {
  size_t slash = source.find_last_of('/');
  return slash == std::string::npos ? name : source.substr(0, slash + 1) + name;
}

} // namespace

Result<HfModelConfig> parseHfModelConfig(const std::string &configJson,
                                         const std::string &generationConfigJson,
                                         const std::string &source) {
  KILN_ASSIGN_OR_RETURN(Json json, parseObject(configJson, source));
  std::string generationSource = siblingName(source, "generation_config.json");
  Json generation;
  if (!generationConfigJson.empty()) {
    KILN_ASSIGN_OR_RETURN(generation, parseObject(generationConfigJson, generationSource));
  }
  KILN_RETURN_IF_ERROR(checkSupported(json, source));
  HfModelConfig config;
  config.modelType = json["model_type"].get<std::string>();
  KILN_RETURN_IF_ERROR(readShape(json, source, config));
  KILN_RETURN_IF_ERROR(readScalars(json, source, config));
  KILN_RETURN_IF_ERROR(readSpecialTokens(json, generationConfigJson.empty() ? nullptr : &generation,
                                         source, generationSource, config));
  return config;
}

Result<HfModelConfig> loadHfModelConfig(const std::string &modelDir) {
  std::string configPath = modelDir + "/config.json";
  if (!fileExists(configPath))
    return notFound(configPath + ": not found (a Hugging Face model directory needs config.json)");
  KILN_ASSIGN_OR_RETURN(std::string configText, readFile(configPath));
  std::string generationPath = modelDir + "/generation_config.json";
  std::string generationText;
  if (fileExists(generationPath)) {
    KILN_ASSIGN_OR_RETURN(generationText, readFile(generationPath));
  }
  return parseHfModelConfig(configText, generationText, configPath);
}

// Mirrors transformers' float32 arithmetic step by step (modeling_rope_utils.py,
// _compute_default_rope_parameters / _compute_llama3_parameters) so kiln's angles match the
// reference bit for bit in the common case, not just approximately.
std::vector<float> ropeInverseFrequencies(const HfModelConfig &config, int64_t rotaryDim) {
  std::vector<float> invFreq;
  if (rotaryDim <= 0)
    return invFreq;
  const float base = static_cast<float>(config.ropeTheta);
  const float dim = static_cast<float>(rotaryDim);
  for (int64_t i = 0; i < rotaryDim; i += 2) {
    float exponent = static_cast<float>(i) / dim;
    invFreq.push_back(1.0f / std::pow(base, exponent));
  }
  if (!config.ropeScaling || config.ropeScaling->type != "llama3")
    return invFreq;
  const RopeScaling &rope = *config.ropeScaling;
  const float factor = static_cast<float>(rope.factor);
  const float lowFreqFactor = static_cast<float>(rope.lowFreqFactor);
  const double oldContext = static_cast<double>(rope.originalMaxPositionEmbeddings);
  const float lowFreqWavelen = static_cast<float>(oldContext / rope.lowFreqFactor);
  const float highFreqWavelen = static_cast<float>(oldContext / rope.highFreqFactor);
  const float twoPi = static_cast<float>(2.0 * std::numbers::pi);
  const float smoothDenominator = static_cast<float>(rope.highFreqFactor - rope.lowFreqFactor);
  for (float &value : invFreq) {
    float wavelen = twoPi / value;
    float scaled = wavelen > lowFreqWavelen ? value / factor : value;
    bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    if (medium) {
      float smooth =
          (static_cast<float>(oldContext) / wavelen - lowFreqFactor) / smoothDenominator;
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    value = scaled;
  }
  return invFreq;
}

} // namespace kiln::compiler
