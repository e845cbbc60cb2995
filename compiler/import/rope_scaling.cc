#include "compiler/import/rope_scaling.h"

#include "compiler/import/config_fields.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace kiln::compiler {
namespace {

constexpr double kPi = std::numbers::pi;

// The scaling object config.json uses: `rope_scaling`, else transformers 5's `rope_parameters`
// (transformers 5 takes a non-empty rope_scaling over rope_parameters).
Result<std::optional<ConfigFields>> scalingObject(const ConfigFields &config) {
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> scaling, config.object("rope_scaling"));
  if (scaling)
    return scaling;
  return config.object("rope_parameters");
}

// rope_theta: top level, overridden by rope_parameters.rope_theta (transformers 5).
Status readTheta(const ConfigFields &config, double &theta) {
  KILN_RETURN_IF_ERROR(config.readDouble("rope_theta", theta));
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> parameters, config.object("rope_parameters"));
  if (parameters) {
    KILN_RETURN_IF_ERROR(parameters->readDouble("rope_theta", theta));
    if (!(theta > 0))
      return parameters->error("rope_theta", "must be positive");
  }
  if (!(theta > 0))
    return config.error("rope_theta", "must be positive");
  return okStatus();
}

// partial_rotary_factor: the scaling object's, else the top level's (transformers 5 moves the
// top-level value into rope_parameters unless it has one). rotary_dim = int(head_dim * factor).
Status readRotaryDim(const ConfigFields &config, const std::optional<ConfigFields> &scaling,
                     RopeConfig &rope) {
  const ConfigFields &owner = scaling && scaling->has("partial_rotary_factor") ? *scaling : config;
  KILN_RETURN_IF_ERROR(owner.readDouble("partial_rotary_factor", rope.partialRotaryFactor));
  const double factor = rope.partialRotaryFactor;
  if (!(factor > 0 && factor <= 1))
    return owner.error("partial_rotary_factor",
                       "must be in (0, 1], got " + owner.dump("partial_rotary_factor"));
  rope.rotaryDim = static_cast<int64_t>(static_cast<double>(rope.headDim) * factor);
  if (rope.rotaryDim < 2 || rope.rotaryDim % 2 != 0)
    return owner.error("partial_rotary_factor",
                       owner.dump("partial_rotary_factor") + " gives rotary_dim int(head_dim " +
                           std::to_string(rope.headDim) + " * factor) = " +
                           std::to_string(rope.rotaryDim) + ", which must be even and >= 2");
  return okStatus();
}

// The type and the key it came from: `rope_type` wins over the legacy `type`, as in transformers.
Status readType(const ConfigFields &scaling, std::string &type, std::string &typeKey) {
  typeKey = scaling.has("rope_type") ? "rope_type" : "type";
  return scaling.readString(typeKey, type);
}

Status readFactor(const ConfigFields &scaling, RopeScaling &rope) {
  KILN_RETURN_IF_ERROR(scaling.readDouble("factor", rope.factor, /*required=*/true));
  if (!(rope.factor > 0))
    return scaling.error("factor", "must be positive, got " + scaling.dump("factor"));
  return okStatus();
}

// A positive number, or absent; `value` keeps its default when absent.
Status readPositive(const ConfigFields &scaling, const std::string &key, double &value) {
  if (!scaling.has(key))
    return okStatus();
  KILN_RETURN_IF_ERROR(scaling.readDouble(key, value));
  if (!(value > 0))
    return scaling.error(key, "must be positive, got " + scaling.dump(key));
  return okStatus();
}

Status readAttentionFactor(const ConfigFields &scaling, RopeScaling &rope) {
  if (!scaling.has("attention_factor"))
    return okStatus();
  double value = 0;
  KILN_RETURN_IF_ERROR(readPositive(scaling, "attention_factor", value));
  rope.attentionFactor = value;
  return okStatus();
}

// yarn's beta_fast / beta_slow: transformers reads `get(key) or default`, so 0 is the default too.
Status readBeta(const ConfigFields &scaling, const std::string &key, double &value) {
  double read = 0;
  KILN_RETURN_IF_ERROR(scaling.readDouble(key, read));
  if (read < 0)
    return scaling.error(key, "must be positive, got " + scaling.dump(key));
  if (read > 0)
    value = read;
  return okStatus();
}

Status readLlama3(const ConfigFields &scaling, RopeScaling &rope) {
  KILN_RETURN_IF_ERROR(readFactor(scaling, rope));
  KILN_RETURN_IF_ERROR(scaling.readDouble("low_freq_factor", rope.lowFreqFactor, true));
  KILN_RETURN_IF_ERROR(scaling.readDouble("high_freq_factor", rope.highFreqFactor, true));
  if (rope.lowFreqFactor <= 0 || rope.highFreqFactor <= rope.lowFreqFactor)
    return scaling.error("high_freq_factor",
                         "must be greater than low_freq_factor, and both positive");
  return okStatus();
}

Status readYarn(const ConfigFields &scaling, RopeScaling &rope) {
  KILN_RETURN_IF_ERROR(readFactor(scaling, rope));
  KILN_RETURN_IF_ERROR(readAttentionFactor(scaling, rope));
  KILN_RETURN_IF_ERROR(readBeta(scaling, "beta_fast", rope.betaFast));
  KILN_RETURN_IF_ERROR(readBeta(scaling, "beta_slow", rope.betaSlow));
  KILN_RETURN_IF_ERROR(scaling.readDouble("mscale", rope.mscale));
  KILN_RETURN_IF_ERROR(scaling.readDouble("mscale_all_dim", rope.mscaleAllDim));
  return scaling.readBool("truncate", rope.truncate);
}

Status readLongrope(const ConfigFields &scaling, const RopeConfig &config, RopeScaling &rope) {
  const size_t pairs = static_cast<size_t>(config.rotaryDim / 2);
  for (auto [key, factors] :
       {std::pair{"short_factor", &rope.shortFactor}, std::pair{"long_factor", &rope.longFactor}}) {
    KILN_RETURN_IF_ERROR(scaling.readDoubles(key, *factors, /*required=*/true));
    if (factors->size() != pairs)
      return scaling.error(key, "must list rotary_dim/2 = " + std::to_string(pairs) +
                                    " numbers, got " + std::to_string(factors->size()));
    for (size_t i = 0; i < pairs; ++i)
      if (!((*factors)[i] > 0))
        return scaling.error(key, "must hold positive numbers, got " +
                                      std::to_string((*factors)[i]) + " at [" + std::to_string(i) +
                                      "]");
  }
  KILN_RETURN_IF_ERROR(readAttentionFactor(scaling, rope));
  // transformers derives the factor from the context lengths when the file has none.
  rope.factor = static_cast<double>(config.maxPositionEmbeddings) /
                static_cast<double>(rope.originalMaxPositionEmbeddings);
  return readPositive(scaling, "factor", rope.factor);
}

// llama3, yarn and longrope's pretraining context: the scaling object's, else
// max_position_embeddings; for longrope Phi-3's top-level field wins (transformers' Phi3Config
// gives it priority; LlamaConfig would ignore it).
Status readOriginalMax(const ConfigFields &config, const ConfigFields &scaling,
                       int64_t maxPositionEmbeddings, RopeScaling &rope) {
  const std::string key = "original_max_position_embeddings";
  rope.originalMaxPositionEmbeddings = maxPositionEmbeddings;
  const bool topLevel = rope.type == "longrope" && config.has(key);
  return (topLevel ? config : scaling).readPositiveInt(key, rope.originalMaxPositionEmbeddings);
}

Status readScaling(const ConfigFields &config, const ConfigFields &scaling,
                   const RopeTypeAliases &aliases, RopeConfig &rope) {
  std::string type, typeKey;
  KILN_RETURN_IF_ERROR(readType(scaling, type, typeKey));
  for (const auto &[from, to] : aliases)
    if (type == from) {
      type = to;
      break;
    }
  // transformers 5 nests the parameters per layer type (Gemma 3, ...): not one rope for all layers.
  for (const char *layerType : {"full_attention", "sliding_attention"})
    if (type.empty() && scaling.has(layerType))
      return unimplemented(config.source() + ": field '" + scaling.field(layerType) +
                           "' is set; kiln supports one rope for every layer, not rope parameters "
                           "per layer type");
  if (type.empty() || type == "default")
    return okStatus();
  if (type != "linear" && type != "dynamic" && type != "yarn" && type != "longrope" &&
      type != "llama3")
    return unimplemented(config.source() + ": field '" + scaling.field(typeKey) + "' is '" + type +
                         "'; kiln supports rope scaling types: " + kSupportedRopeTypes);
  RopeScaling scaled;
  scaled.type = type;
  if (type == "llama3" || type == "yarn" || type == "longrope")
    KILN_RETURN_IF_ERROR(readOriginalMax(config, scaling, rope.maxPositionEmbeddings, scaled));
  if (type == "linear" || type == "dynamic")
    KILN_RETURN_IF_ERROR(readFactor(scaling, scaled));
  if (type == "llama3")
    KILN_RETURN_IF_ERROR(readLlama3(scaling, scaled));
  if (type == "yarn")
    KILN_RETURN_IF_ERROR(readYarn(scaling, scaled));
  if (type == "longrope")
    KILN_RETURN_IF_ERROR(readLongrope(scaling, rope, scaled));
  // dim / (dim - 2) in the dynamic base.
  if (type == "dynamic" && rope.rotaryDim <= 2)
    return scaling.error(typeKey, "'dynamic' needs a rotary dim above 2, got " +
                                      std::to_string(rope.rotaryDim));
  rope.scaling = std::move(scaled);
  return okStatus();
}

// transformers' base ** (arange(0, dim, 2).float() / dim): one fp32 power per pair.
std::vector<float> basePowers(double theta, int64_t rotaryDim) {
  const float base = static_cast<float>(theta);
  const float dim = static_cast<float>(rotaryDim);
  std::vector<float> powers;
  for (int64_t i = 0; i < rotaryDim; i += 2)
    powers.push_back(std::pow(base, static_cast<float>(i) / dim));
  return powers;
}

std::vector<float> reciprocals(std::vector<float> values) {
  for (float &value : values)
    value = 1.0f / value;
  return values;
}

void applyLlama3(const RopeScaling &rope, std::vector<float> &invFreq) {
  const float factor = static_cast<float>(rope.factor);
  const float lowFreqFactor = static_cast<float>(rope.lowFreqFactor);
  const double oldContext = static_cast<double>(rope.originalMaxPositionEmbeddings);
  const float lowFreqWavelen = static_cast<float>(oldContext / rope.lowFreqFactor);
  const float highFreqWavelen = static_cast<float>(oldContext / rope.highFreqFactor);
  const float twoPi = static_cast<float>(2.0 * kPi);
  const float smoothDenominator = static_cast<float>(rope.highFreqFactor - rope.lowFreqFactor);
  for (float &value : invFreq) {
    float wavelen = twoPi / value;
    float scaled = wavelen > lowFreqWavelen ? value / factor : value;
    bool medium = !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    if (medium) {
      float smooth = (static_cast<float>(oldContext) / wavelen - lowFreqFactor) / smoothDenominator;
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    value = scaled;
  }
}

// yarn's cos/sin scale: attention_factor, else from mscale / mscale_all_dim, else from factor.
double yarnAttentionFactor(const RopeScaling &rope) {
  if (rope.attentionFactor)
    return *rope.attentionFactor;
  auto mscaleOf = [&](double mscale) {
    return rope.factor <= 1 ? 1.0 : 0.1 * mscale * std::log(rope.factor) + 1.0;
  };
  if (rope.mscale != 0 && rope.mscaleAllDim != 0)
    return mscaleOf(rope.mscale) / mscaleOf(rope.mscaleAllDim);
  return mscaleOf(1.0);
}

// The dimension at which a wavelength turns `rotations` times in the original context (double).
double correctionDim(double rotations, int64_t dim, double base, int64_t originalMax) {
  return (static_cast<double>(dim) *
          std::log(static_cast<double>(originalMax) / (rotations * 2 * kPi))) /
         (2 * std::log(base));
}

// yarn: interpolated (/ factor) low frequencies, extrapolated high ones, a linear ramp between
// the correction dims of beta_fast and beta_slow rotations; fp32 tensors, double Python scalars.
std::vector<float> yarnInvFreq(const RopeConfig &config, const RopeScaling &rope) {
  const int64_t dim = config.rotaryDim;
  double low = correctionDim(rope.betaFast, dim, config.theta, rope.originalMaxPositionEmbeddings);
  double high = correctionDim(rope.betaSlow, dim, config.theta, rope.originalMaxPositionEmbeddings);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high)
    high += 0.001; // transformers' guard against a zero-width ramp
  const float rampMin = static_cast<float>(low);
  const float rampWidth = static_cast<float>(high - low);
  const float factor = static_cast<float>(rope.factor);
  std::vector<float> powers = basePowers(config.theta, dim);
  std::vector<float> invFreq(powers.size());
  for (size_t i = 0; i < powers.size(); ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - rampMin) / rampWidth, 0.0f, 1.0f);
    const float extrapolationFactor = 1.0f - ramp;
    const float extrapolation = 1.0f / powers[i];
    const float interpolation = 1.0f / (factor * powers[i]);
    const float interpolated = interpolation * (1.0f - extrapolationFactor);
    invFreq[i] = interpolated + extrapolation * extrapolationFactor;
  }
  return invFreq;
}

// longrope: 1 / (ext_factor[i] * base^(2i/dim)), the factors rounded to fp32.
std::vector<float> longropeInvFreq(const RopeConfig &config, const std::vector<double> &factors) {
  std::vector<float> invFreq = basePowers(config.theta, config.rotaryDim);
  assert(factors.size() == invFreq.size());
  for (size_t i = 0; i < invFreq.size(); ++i) {
    const float factor = i < factors.size() ? static_cast<float>(factors[i]) : 1.0f;
    invFreq[i] = 1.0f / (factor * invFreq[i]);
  }
  return invFreq;
}

double longropeAttentionFactor(const RopeScaling &rope) {
  if (rope.attentionFactor)
    return *rope.attentionFactor;
  if (rope.factor <= 1.0)
    return 1.0;
  return std::sqrt(1 + std::log(rope.factor) /
                           std::log(static_cast<double>(rope.originalMaxPositionEmbeddings)));
}

// dynamic's row at construction (seq_len = max_position_embeddings, all Python doubles): the
// base is theta * 1^x up to rounding, then cast to fp32 like any base.
std::vector<float> dynamicBaseRow(const RopeConfig &config, const RopeScaling &rope) {
  const double maxPositions = static_cast<double>(config.maxPositionEmbeddings);
  const double dim = static_cast<double>(config.rotaryDim);
  const double base =
      config.theta *
      std::pow((rope.factor * maxPositions / maxPositions) - (rope.factor - 1), dim / (dim - 2));
  return reciprocals(basePowers(base, config.rotaryDim));
}

} // namespace

Result<RopeConfig> parseRopeConfig(const ConfigFields &config, int64_t headDim,
                                   int64_t maxPositionEmbeddings, const RopeTypeAliases &aliases) {
  RopeConfig rope;
  rope.headDim = headDim;
  rope.maxPositionEmbeddings = maxPositionEmbeddings;
  KILN_RETURN_IF_ERROR(readTheta(config, rope.theta));
  KILN_ASSIGN_OR_RETURN(std::optional<ConfigFields> scaling, scalingObject(config));
  KILN_RETURN_IF_ERROR(readRotaryDim(config, scaling, rope));
  if (scaling)
    KILN_RETURN_IF_ERROR(readScaling(config, *scaling, aliases, rope));
  return rope;
}

RopeTables ropeTables(const RopeConfig &config) {
  RopeTables tables;
  tables.rotaryDim = config.rotaryDim;
  if (config.rotaryDim <= 0)
    return tables;
  tables.invFreq = reciprocals(basePowers(config.theta, config.rotaryDim));
  if (!config.scaling)
    return tables;
  const RopeScaling &rope = *config.scaling;
  if (rope.type == "linear") {
    const float factor = static_cast<float>(rope.factor);
    for (float &value : tables.invFreq)
      value /= factor;
  } else if (rope.type == "llama3") {
    applyLlama3(rope, tables.invFreq);
  } else if (rope.type == "yarn") {
    tables.invFreq = yarnInvFreq(config, rope);
    tables.attentionScaling = static_cast<float>(yarnAttentionFactor(rope));
  } else if (rope.type == "longrope") {
    tables.mode = RopeMode::kLongShort;
    tables.invFreq = longropeInvFreq(config, rope.shortFactor);
    tables.longInvFreq = longropeInvFreq(config, rope.longFactor);
    tables.originalMaxPositions = rope.originalMaxPositionEmbeddings;
    tables.attentionScaling = static_cast<float>(longropeAttentionFactor(rope));
  } else if (rope.type == "dynamic") {
    tables.mode = RopeMode::kDynamicNtk;
    tables.invFreq = dynamicBaseRow(config, rope);
    tables.originalMaxPositions = config.maxPositionEmbeddings;
    tables.ropeTheta = static_cast<float>(config.theta);
    tables.dynamicFactor = rope.factor;
  }
  return tables;
}

std::vector<float> dynamicNtkInvFreq(const RopeTables &tables, int64_t seqLen) {
  assert(tables.mode == RopeMode::kDynamicNtk);
  if (seqLen <= tables.originalMaxPositions)
    return tables.invFreq;
  std::vector<float> invFreq(static_cast<size_t>(tables.rotaryDim / 2));
  kernels::cpu::dynamicNtkInvFreq(
      tables.ropeTheta, tables.dynamicFactor, static_cast<int32_t>(tables.originalMaxPositions),
      static_cast<int32_t>(tables.rotaryDim), static_cast<int32_t>(seqLen), invFreq.data());
  return invFreq;
}

} // namespace kiln::compiler
