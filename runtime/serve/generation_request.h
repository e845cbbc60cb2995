// One generation request as the HTTP layer understands it, whichever API it came through: the
// prompt (text, ids or chat messages), sampling settings and what to report. Parsers fill it;
// generation.h turns it into an engine Request.
#pragma once

#include "runtime/sampling/sampling_params.h"
#include "runtime/structured/grammar.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt::serve {

struct PromptInput {
  enum class Kind { kText, kIds, kChat };
  Kind kind = Kind::kText;
  std::string text;
  std::vector<int32_t> ids;
  nlohmann::ordered_json messages; // kChat: the OpenAI messages array, key order kept
  bool addGenerationPrompt = true;
  nlohmann::ordered_json chatExtra; // further template variables (tools, kwargs)
  std::string field = "prompt";     // the request field errors about the prompt name
};

// OpenAI tool calling (runtime/serve/tool_request.h).
struct ToolSettings {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  Choice choice = Choice::kNone; // kNone: no tools, or tool_choice "none"
  std::string namedFunction;     // kNamed: the function whose arguments the output is
  bool parallel = true;          // parallel_tool_calls
};

struct GenerationRequest {
  PromptInput prompt;
  // /v1/completions' batch form ("prompt": an array of prompts): prompts 1..P-1, each run as its
  // own engine request with the same settings. `prompt` is prompt 0.
  std::vector<PromptInput> extraPrompts;
  SamplingParams sampling;
  std::string maxTokensField = "max_tokens"; // named by the context-length error
  // Used when the client gave no max tokens, clamped to the room the prompt leaves (an explicit
  // value that does not fit is an error instead). Unset: until the maximum sequence length.
  std::optional<int32_t> defaultMaxTokens;
  std::string model; // "" when the client did not say
  bool stream = false;
  bool includeUsage = false;   // OpenAI stream_options.include_usage
  bool logprobs = false;       // report the sampled tokens' logprobs
  int32_t topLogprobs = 0;     // and this many alternatives
  bool echo = false;           // completions: prepend the prompt to the text
  bool returnTokenIds = false; // vLLM extension: token_ids / prompt_token_ids in the response
  bool details = false;        // TGI: the details object
  bool returnFullText = false; // TGI: prepend the prompt text
  // Structured output (runtime/serve/structured_request.h): every sample's text matches it.
  std::shared_ptr<const structured::Grammar> grammar;
  ToolSettings tools; // chat only

  size_t promptCount() const { return 1 + extraPrompts.size(); }
  const PromptInput &promptAt(size_t i) const { return i == 0 ? prompt : extraPrompts.at(i - 1); }
};

} // namespace kiln::rt::serve
