// A GGUF file's metadata as the Hugging Face config.json and generation_config.json the compile
// reads (compiler/import/hf_config.h), so one config path serves both front ends. Each
// `general.architecture` kiln reads maps to the HF model_type / architectures of the same
// family; its `<arch>.*` keys map to the HF fields transformers' GGUF loader fills.
#pragma once

#include "compiler/import/gguf_file.h"
#include "runtime/base/status.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// The GGUF architectures kiln compiles and their HF model_type: llama (also Mistral files,
// which llama.cpp writes as llama), qwen2, qwen3, phi3.
struct GgufArchitecture {
  const char *name;      // general.architecture
  const char *modelType; // HF config.json model_type
  const char *hfClass;   // HF architectures[0]
  bool permutedQk;       // llama.cpp permuted q/k rows for its interleaved rope (undone)
};
const std::vector<GgufArchitecture> &ggufArchitectures();
std::string supportedGgufArchitectures(); // "llama, qwen2, qwen3, phi3"

// general.architecture of `gguf`, or an error naming it and the supported ones.
Result<const GgufArchitecture *> ggufArchitecture(const GgufFile &gguf);

struct GgufHfConfig {
  std::string configJson;           // config.json text
  std::string generationConfigJson; // generation_config.json text
};

// The config files of `gguf`. Missing required keys are errors naming the key
// ("model.gguf: metadata key 'llama.block_count' is missing").
Result<GgufHfConfig> ggufHfConfig(const GgufFile &gguf);

} // namespace kiln::compiler
