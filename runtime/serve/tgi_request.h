// TGI request bodies ({"inputs", "parameters", "stream"}) -> GenerationRequest, for POST /generate,
// /generate_stream and SageMaker's /invocations. Errors name the field ("parameters.top_p").
#pragma once

#include "runtime/serve/api_error.h"
#include "runtime/serve/generation_request.h"

#include <nlohmann/json.hpp>

#include <optional>

namespace kiln::rt::serve {

// TGI's default when max_new_tokens is absent.
inline constexpr int32_t kDefaultMaxNewTokens = 100;

// `rawBody` (the text `body` was parsed from), when given, keeps the member order of a JSON schema
// in parameters.grammar (nlohmann::json sorts keys).
std::optional<ApiError> parseTgiRequest(const nlohmann::json &body, GenerationRequest &out,
                                        const std::string *rawBody = nullptr);

// What a SageMaker /invocations body is: TGI-style {"inputs"}, OpenAI chat {"messages"} or OpenAI
// completion {"prompt"}.
enum class InvocationKind { kTgi, kChat, kCompletion };
std::optional<ApiError> classifyInvocation(const nlohmann::json &body, InvocationKind &kind);

} // namespace kiln::rt::serve
