#include "compiler/import/hf_config.h"

#include "compiler/import/config_fields.h"

#include "runtime/base/file.h"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace kiln::compiler {
namespace {

// Which model types compile is the families' call (compiler/models/model_family.h); which
// quantization_config kiln reads, hf_quantization.h's.
Status checkSupported(const ConfigFields &reader) {
  std::string modelType;
  return reader.readString("model_type", modelType, /*required=*/true);
}

// The RoPE tables (rope_scaling.h) hold head_dim / 2 entries and are built from the config before
// any weight is read, so a corrupt head_dim would size an allocation; real models use <= 256.
constexpr int64_t kMaxHeadDim = 4096;

Status readShape(const ConfigFields &reader, HfModelConfig &config) {
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
  if (reader.has("head_dim")) {
    KILN_RETURN_IF_ERROR(reader.readPositiveInt("head_dim", config.headDim));
  } else {
    if (config.hiddenSize % config.numHeads != 0)
      return reader.error("hidden_size", "(" + std::to_string(config.hiddenSize) +
                                             ") must be a multiple of 'num_attention_heads' (" +
                                             std::to_string(config.numHeads) +
                                             ") when 'head_dim' is absent");
    config.headDim = config.hiddenSize / config.numHeads;
  }
  if (config.headDim > kMaxHeadDim) {
    const std::string limit = "; kiln compiles head_dim up to " + std::to_string(kMaxHeadDim);
    if (reader.has("head_dim"))
      return reader.error("head_dim", "is " + std::to_string(config.headDim) + limit);
    return reader.error("hidden_size", "(" + std::to_string(config.hiddenSize) +
                                           ") / 'num_attention_heads' gives head_dim " +
                                           std::to_string(config.headDim) + limit);
  }
  // rotate_half pairs element i with i + head_dim/2.
  if (config.headDim % 2 != 0)
    return reader.error("head_dim", "must be even for rotary embeddings, got " +
                                        std::to_string(config.headDim));
  KILN_RETURN_IF_ERROR(
      reader.readPositiveInt("max_position_embeddings", config.maxPositionEmbeddings));
  return okStatus();
}

Status readScalars(const ConfigFields &reader, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(reader.readFirstString("architectures", config.architecture));
  KILN_RETURN_IF_ERROR(reader.readDouble("rms_norm_eps", config.rmsNormEps));
  if (config.rmsNormEps <= 0)
    return reader.error("rms_norm_eps", "must be positive");
  KILN_RETURN_IF_ERROR(reader.readBool("tie_word_embeddings", config.tieWordEmbeddings));
  KILN_RETURN_IF_ERROR(reader.readBool("attention_bias", config.attentionBias));
  KILN_RETURN_IF_ERROR(reader.readBool("mlp_bias", config.mlpBias));
  KILN_RETURN_IF_ERROR(reader.readString("torch_dtype", config.torchDtype));
  if (config.torchDtype.empty()) // transformers >= 4.56 writes `dtype`
    KILN_RETURN_IF_ERROR(reader.readString("dtype", config.torchDtype));
  return okStatus();
}

// rope_theta, partial_rotary_factor and the scaling (rope_scaling.h) need the shape read first.
Status readRope(const ConfigFields &fields, const RopeTypeAliases &aliases, HfModelConfig &config) {
  KILN_ASSIGN_OR_RETURN(RopeConfig rope, parseRopeConfig(fields, config.headDim,
                                                         config.maxPositionEmbeddings, aliases));
  config.ropeTheta = rope.theta;
  config.ropeScaling = std::move(rope.scaling);
  config.partialRotaryFactor = rope.partialRotaryFactor;
  config.rotaryDim = rope.rotaryDim;
  return okStatus();
}

void appendUnique(std::vector<int32_t> &ids, const std::vector<int32_t> &more) {
  for (int32_t id : more)
    if (std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(id);
}

// bos/pad: generation_config.json wins when it sets them; eos: union, config.json first.
Status readSpecialTokens(const ConfigFields &reader, const ConfigFields *generation,
                         HfModelConfig &out) {
  std::vector<int32_t> bos, pad, eos;
  KILN_RETURN_IF_ERROR(reader.readTokenIds("bos_token_id", bos));
  KILN_RETURN_IF_ERROR(reader.readTokenIds("pad_token_id", pad));
  KILN_RETURN_IF_ERROR(reader.readTokenIds("eos_token_id", eos));
  appendUnique(out.eosTokenIds, eos);
  if (generation) {
    std::vector<int32_t> genBos, genPad, genEos;
    KILN_RETURN_IF_ERROR(generation->readTokenIds("bos_token_id", genBos));
    KILN_RETURN_IF_ERROR(generation->readTokenIds("pad_token_id", genPad));
    KILN_RETURN_IF_ERROR(generation->readTokenIds("eos_token_id", genEos));
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
                                         const std::string &source,
                                         const RopeTypeAliases &ropeTypeAliases) {
  KILN_ASSIGN_OR_RETURN(ConfigFields fields, ConfigFields::parse(configJson, source));
  std::optional<ConfigFields> generation;
  if (!generationConfigJson.empty()) {
    KILN_ASSIGN_OR_RETURN(
        generation,
        ConfigFields::parse(generationConfigJson, siblingName(source, "generation_config.json")));
  }
  KILN_RETURN_IF_ERROR(checkSupported(fields));
  HfModelConfig config;
  KILN_RETURN_IF_ERROR(fields.readString("model_type", config.modelType, /*required=*/true));
  KILN_RETURN_IF_ERROR(readShape(fields, config));
  KILN_RETURN_IF_ERROR(readScalars(fields, config));
  KILN_RETURN_IF_ERROR(readRope(fields, ropeTypeAliases, config));
  KILN_RETURN_IF_ERROR(readSpecialTokens(fields, generation ? &*generation : nullptr, config));
  KILN_ASSIGN_OR_RETURN(config.quantization, parseHfQuantization(fields));
  return config;
}

Result<HfModelConfig> loadHfModelConfig(const std::string &modelDir,
                                        const RopeTypeAliases &ropeTypeAliases,
                                        const std::string *configJson) {
  std::string configPath = modelDir + "/config.json";
  if (!configJson && !fileExists(configPath))
    return notFound(configPath + ": not found (a Hugging Face model directory needs config.json)");
  std::string configText;
  if (configJson) {
    configText = *configJson;
  } else {
    KILN_ASSIGN_OR_RETURN(configText, readFile(configPath));
  }
  std::string generationPath = modelDir + "/generation_config.json";
  std::string generationText;
  if (fileExists(generationPath)) {
    KILN_ASSIGN_OR_RETURN(generationText, readFile(generationPath));
  }
  return parseHfModelConfig(configText, generationText, configPath, ropeTypeAliases);
}

RopeConfig ropeConfig(const HfModelConfig &config) {
  RopeConfig rope;
  rope.theta = config.ropeTheta;
  rope.headDim = config.headDim;
  rope.partialRotaryFactor = config.partialRotaryFactor;
  rope.rotaryDim = config.rotaryDim > 0 ? config.rotaryDim : config.headDim;
  rope.maxPositionEmbeddings = config.maxPositionEmbeddings;
  rope.scaling = config.ropeScaling;
  return rope;
}

RopeTables ropeTables(const HfModelConfig &config) {
  return ropeTables(ropeConfig(config));
}

std::vector<float> ropeInverseFrequencies(const HfModelConfig &config, int64_t rotaryDim) {
  RopeConfig rope = ropeConfig(config);
  rope.rotaryDim = rotaryDim;
  return ropeTables(rope).invFreq;
}

} // namespace kiln::compiler
