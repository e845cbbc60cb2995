// OpenAI request bodies -> GenerationRequest. Every field is type- and range-checked and an error
// names the field in OpenAI's "param". Also accepts vLLM's extensions (top_k, min_p,
// repetition_penalty, ignore_eos, min_tokens, stop_token_ids, return_token_ids).
#pragma once

#include "runtime/serve/api_error.h"
#include "runtime/serve/generation_request.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kiln::rt::serve {

// The most alternatives a request may ask for per token (OpenAI's limit).
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr int32_t kMaxSamples = 128;
inline constexpr size_t kMaxStopStrings = 16;
// The most prompts one /v1/completions request may carry (its batch form).
inline constexpr size_t kMaxPrompts = 256;
// OpenAI's legacy completions default.
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;

// POST /v1/completions. Returns the first error found. A batch of P prompts fills `prompt` and
// `extraPrompts` (their fields then name "prompt[i]"). `rawBody` (the text `body` was parsed
// from), when given, keeps a JSON schema's member order (nlohmann::json sorts keys).
std::optional<ApiError> parseCompletionRequest(const nlohmann::json &body, GenerationRequest &out,
                                               const std::string *rawBody = nullptr);
// POST /v1/chat/completions (and a chat body sent to /invocations). `body` is `rawBody` as
// parseJsonObject parsed it. nlohmann::json sorts object keys, but chat templates print the
// client's JSON (messages, tools, chat_template_kwargs) in the client's key order, as transformers
// does, so what reaches the template is parsed again from `rawBody` with the order kept.
std::optional<ApiError> parseChatRequest(const nlohmann::json &body, const std::string &rawBody,
                                         GenerationRequest &out);

// The sampling fields OpenAI's two endpoints share (and SageMaker's chat/completion bodies).
class JsonFields;
void readOpenAiSampling(JsonFields &fields, GenerationRequest &out);
// A min tokens field (`minField`, as the request spells it) above an explicit max tokens can never
// be met: an error naming both fields. Call after both are read.
void checkMinTokens(JsonFields &fields, const char *minField, const GenerationRequest &out);

} // namespace kiln::rt::serve
