// OpenAI response bodies: completions and chat completions, whole and as stream chunks, with
// usage and logprobs in OpenAI's two logprobs shapes (legacy completions; chat "content").
#pragma once

#include "runtime/serve/generation.h"
#include "runtime/serve/generation_request.h"
#include "runtime/serve/serve_model.h"

#include <nlohmann/json.hpp>

#include <span>
#include <string>

namespace kiln::rt::serve {

// Identity shared by every chunk of one response.
struct ResponseHeader {
  std::string id;
  int64_t created = 0;
  std::string model;
};

nlohmann::json usageJson(const Usage &usage);
// "stop" / "length" / "abort" / "error"; null while generating.
nlohmann::json finishReasonJson(FinishReason reason);
// A chat choice's: "tool_calls" when the model's calls end it (tool_choice "auto" or "required").
nlohmann::json chatFinishReasonJson(FinishReason reason, const ToolSettings &tools, bool called);
// {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json toolCallJson(const std::string &id, const ToolCall &call);

// Legacy completions logprobs: {"tokens","token_logprobs","top_logprobs","text_offset"}.
// `textOffset` is where the first token's text starts in the choice's text.
nlohmann::json completionLogprobsJson(std::span<const int32_t> ids,
                                      std::span<const TokenLogprobs> logprobs, bool withTop,
                                      size_t textOffset, const ServeModel &model);
// Chat logprobs: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}.
nlohmann::json chatLogprobsJson(std::span<const int32_t> ids,
                                std::span<const TokenLogprobs> logprobs, const ServeModel &model);

// The prompt text a completion echoes (`prompt` is the one `result` answered).
std::string echoText(const PromptInput &prompt, const GenerationResult &result,
                     const ServeModel &model);

// One result per prompt: choice prompt * n + j is sample j of prompt `prompt`; usage sums them.
nlohmann::json completionResponse(const ResponseHeader &header, const GenerationRequest &request,
                                  const std::vector<GenerationResult> &results,
                                  const ServeModel &model);
nlohmann::json chatResponse(const ResponseHeader &header, const GenerationRequest &request,
                            const GenerationResult &result, const ServeModel &model);

// Stream chunks ("text_completion" / "chat.completion.chunk"). `choice` is one choice object.
nlohmann::json completionChunk(const ResponseHeader &header, nlohmann::json choice);
nlohmann::json chatChunk(const ResponseHeader &header, nlohmann::json choice);
// The final chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usageChunk(const ResponseHeader &header, const char *object, const Usage &usage);

} // namespace kiln::rt::serve
