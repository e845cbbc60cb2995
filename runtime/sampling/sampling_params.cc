#include "runtime/sampling/sampling_params.h"

#include <cmath>

namespace kiln::rt {
namespace {

Status rangeError(const std::string &field, const std::string &range, const std::string &got) {
  return invalidArgument("sampling field '" + field + "' must be " + range + ", got " + got);
}

} // namespace

Status validateSamplingParams(const SamplingParams &p, int32_t vocabSize, int32_t maxLogprobs) {
  if (p.n < 1)
    return rangeError("n", ">= 1", std::to_string(p.n));
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return rangeError("temperature", ">= 0", std::to_string(p.temperature));
  if (p.topK < -1)
    return rangeError("top_k", "-1, 0 (off) or >= 1", std::to_string(p.topK));
  if (!(p.topP > 0 && p.topP <= 1))
    return rangeError("top_p", "in (0, 1]", std::to_string(p.topP));
  if (!(p.minP >= 0 && p.minP <= 1))
    return rangeError("min_p", "in [0, 1]", std::to_string(p.minP));
  if (!(p.repetitionPenalty > 0) || !std::isfinite(p.repetitionPenalty))
    return rangeError("repetition_penalty", "> 0", std::to_string(p.repetitionPenalty));
  if (!(p.presencePenalty >= -2 && p.presencePenalty <= 2))
    return rangeError("presence_penalty", "in [-2, 2]", std::to_string(p.presencePenalty));
  if (!(p.frequencyPenalty >= -2 && p.frequencyPenalty <= 2))
    return rangeError("frequency_penalty", "in [-2, 2]", std::to_string(p.frequencyPenalty));
  if (p.maxTokens && *p.maxTokens < 1)
    return rangeError("max_tokens", ">= 1", std::to_string(*p.maxTokens));
  if (p.minTokens < 0)
    return rangeError("min_tokens", ">= 0", std::to_string(p.minTokens));
  if (p.maxTokens && p.minTokens > *p.maxTokens)
    return rangeError("min_tokens", "<= max_tokens (" + std::to_string(*p.maxTokens) + ")",
                      std::to_string(p.minTokens));
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > maxLogprobs))
    return rangeError("logprobs", "in [0, " + std::to_string(maxLogprobs) + "]",
                      std::to_string(*p.logprobs));
  for (int32_t id : p.stopTokenIds) {
    if (id < 0 || id >= vocabSize)
      return rangeError("stop_token_ids", "in [0, " + std::to_string(vocabSize) + ")",
                        std::to_string(id));
  }
  for (const std::string &s : p.stop) {
    if (s.empty())
      return invalidArgument("sampling field 'stop' has an empty string");
  }
  return okStatus();
}

} // namespace kiln::rt
