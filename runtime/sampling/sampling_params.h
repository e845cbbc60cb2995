// Per-request sampling settings with vLLM / OpenAI semantics.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt {

// Temperatures below this sample greedily (argmax), as vLLM does.
inline constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  int32_t n = 1;                     // parallel samples of one prompt
  float temperature = 1.0f;          // < kGreedyTemperature: greedy
  int32_t topK = 0;                  // <= 0 or >= vocab: off
  float topP = 1.0f;                 // (0, 1]; 1: off
  float minP = 0.0f;                 // [0, 1]; 0: off
  float repetitionPenalty = 1.0f;    // > 0; on prompt and output tokens; 1: off
  float presencePenalty = 0.0f;      // [-2, 2]; on output tokens
  float frequencyPenalty = 0.0f;     // [-2, 2]; on output tokens
  std::optional<uint64_t> seed;      // per-request RNG; unset: the engine picks one
  std::optional<int32_t> maxTokens;  // unset: until max_seq_len (finish reason length)
  int32_t minTokens = 0;             // stop ids (eos included) are suppressed until reached
  std::vector<int32_t> stopTokenIds; // besides the model's eos ids
  bool ignoreEos = false;            // ignore the model's eos ids (stopTokenIds still stop)
  std::optional<int32_t> logprobs; // top-N alternatives per sampled token; 0: only the sampled one
  std::vector<std::string> stop;   // stop strings; need the engine's StopStringFilterFactory
  bool skipSpecialTokens = true;   // the text leaves special tokens out (vLLM's option)
};

// Checks ranges; messages name the field and the allowed range.
Status validateSamplingParams(const SamplingParams &params, int32_t vocabSize, int32_t maxLogprobs);

} // namespace kiln::rt
