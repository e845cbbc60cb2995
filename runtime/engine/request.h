// What callers hand the engine and what they get back, as plain structs.
#pragma once

#include "runtime/base/status.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/sampling_params.h"
#include "runtime/structured/grammar.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

using RequestId = uint64_t;

struct Request {
  std::vector<int32_t> promptIds;
  SamplingParams sampling;
  // Structured output: every sample's text must match this grammar (runtime/structured: compiled
  // from a JSON schema, regex, choice list or grammar by the API layer); null: unconstrained.
  std::shared_ptr<const structured::Grammar> grammar;
  // An embedding request: the prompt is computed and its last token's final hidden state (the
  // lm_head's input, RequestOutput::embedding) ends it; nothing is generated or sampled. Needs a
  // plan that returns hidden states (RunnerLimits::hiddenWidth), one sample, no grammar.
  bool embed = false;
};

enum class FinishReason : uint8_t {
  kNone,   // still generating
  kStop,   // eos, a stop token id or a stop string
  kLength, // max_tokens or max_seq_len reached
  kAbort,  // cancelled
  kError,  // failed; RequestOutput::error says why
};

// "stop", "length", "abort", "error"; "" for kNone (OpenAI spelling).
const char *finishReasonName(FinishReason reason);

struct Usage {
  int32_t promptTokens = 0;
  int32_t completionTokens = 0;   // over all n samples
  int32_t cachedPromptTokens = 0; // prompt tokens served from the prefix cache
};

// One increment of one sample's stream. Each sample ends with exactly one output whose
// finishReason is set; the request's last output has requestFinished and the usage.
struct RequestOutput {
  RequestId requestId = 0;
  int32_t index = 0;                   // which of the n samples
  std::vector<int32_t> tokenIds;       // new since this sample's previous output
  std::string text;                    // new text; empty without a detokenizer
  std::vector<TokenLogprobs> logprobs; // one per new token when logprobs were requested
  FinishReason finishReason = FinishReason::kNone;
  Status error; // set with kError
  bool requestFinished = false;
  Usage usage; // filled when requestFinished
  // An embedding request's result (Request::embed): the prompt's last final hidden state, fp32,
  // not normalized; set on its only output.
  std::vector<float> embedding;
};

} // namespace kiln::rt
