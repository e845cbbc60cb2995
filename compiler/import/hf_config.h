// Hugging Face config.json (+ generation_config.json) for the families kiln compiles.
// Plain C++ (no MLIR). Unsupported settings fail with an error naming the field.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

struct RopeScaling {
  std::string type;  // "llama3" (the only one supported so far)
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 8192;
};

struct HfModelConfig {
  std::string modelType;      // "llama"
  std::string architecture;   // architectures[0], e.g. "LlamaForCausalLM"
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;     // defaults to numHeads
  int64_t headDim = 0;        // defaults to hiddenSize / numHeads
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  std::optional<RopeScaling> ropeScaling;
  bool tieWordEmbeddings = false;
  bool attentionBias = false;
  bool mlpBias = false;
  int64_t maxPositionEmbeddings = 2048;
  std::string torchDtype;     // informational
  int32_t bosTokenId = -1;
  std::vector<int32_t> eosTokenIds;  // union of config.json and generation_config.json, in order
  int32_t padTokenId = -1;
};

// Reads MODEL_DIR/config.json and, when present, MODEL_DIR/generation_config.json.
Result<HfModelConfig> loadHfModelConfig(const std::string &modelDir);
// Parses config.json text (generation_config optional, "" when absent). `source` names the file
// in error messages.
Result<HfModelConfig> parseHfModelConfig(const std::string &configJson,
                                         const std::string &generationConfigJson,
                                         const std::string &source = "config.json");

// inv_freq[i] for i < rotaryDim/2, exactly as transformers computes it (including llama3 scaling).
std::vector<float> ropeInverseFrequencies(const HfModelConfig &config, int64_t rotaryDim);

} // namespace kiln::compiler
