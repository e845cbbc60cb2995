#include "runtime/serve/openai_response.h"

#include "runtime/serve/json_text.h"
#include "runtime/serve/tool_request.h"

namespace kiln::rt::serve {
namespace {

nlohmann::json bytesOf(const std::string &text) {
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : text)
    bytes.push_back(static_cast<int>(c));
  return bytes;
}

nlohmann::json chatTokenJson(int32_t id, float logprob, const ServeModel &model) {
  std::string text = model.tokenText(id);
  return {{"token", sanitizeUtf8(text)}, {"logprob", logprob}, {"bytes", bytesOf(text)}};
}

nlohmann::json tokenIdsOrNull(const GenerationRequest &request, std::span<const int32_t> ids) {
  if (!request.returnTokenIds)
    return nullptr;
  return nlohmann::json(std::vector<int32_t>(ids.begin(), ids.end()));
}

} // namespace

nlohmann::json usageJson(const Usage &usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cachedPromptTokens}}}};
}

nlohmann::json finishReasonJson(FinishReason reason) {
  if (reason == FinishReason::kNone)
    return nullptr;
  return finishReasonName(reason);
}

nlohmann::json completionLogprobsJson(std::span<const int32_t> ids,
                                      std::span<const TokenLogprobs> logprobs, bool withTop,
                                      size_t textOffset, const ServeModel &model) {
  nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(),
                 tops = nlohmann::json::array(), offsets = nlohmann::json::array();
  for (size_t i = 0; i < logprobs.size() && i < ids.size(); ++i) {
    std::string text = model.tokenText(ids[i]);
    tokens.push_back(sanitizeUtf8(text));
    values.push_back(logprobs[i].sampled.logprob);
    offsets.push_back(textOffset);
    textOffset += text.size();
    if (!withTop)
      continue;
    nlohmann::json top = nlohmann::json::object();
    // Keyed by text: alternatives that decode alike keep the likelier one (they come first).
    for (const TokenLogprob &alt : logprobs[i].top) {
      std::string key = sanitizeUtf8(model.tokenText(alt.tokenId));
      if (!top.contains(key))
        top[key] = alt.logprob;
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", withTop ? tops : nlohmann::json(nullptr)},
          {"text_offset", offsets}};
}

nlohmann::json chatLogprobsJson(std::span<const int32_t> ids,
                                std::span<const TokenLogprobs> logprobs, const ServeModel &model) {
  nlohmann::json content = nlohmann::json::array();
  for (size_t i = 0; i < logprobs.size() && i < ids.size(); ++i) {
    nlohmann::json entry = chatTokenJson(ids[i], logprobs[i].sampled.logprob, model);
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob &alt : logprobs[i].top)
      top.push_back(chatTokenJson(alt.tokenId, alt.logprob, model));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", content}};
}

std::string echoText(const PromptInput &prompt, const GenerationResult &result,
                     const ServeModel &model) {
  if (prompt.kind == PromptInput::Kind::kText)
    return prompt.text;
  return model.decode(result.promptIds);
}

namespace {

void appendCompletionChoices(const GenerationRequest &request, size_t promptIndex,
                             const GenerationResult &result, const ServeModel &model,
                             nlohmann::json &choices) {
  std::string echo = request.echo ? echoText(request.promptAt(promptIndex), result, model) : "";
  for (const SampleResult &s : result.samples) {
    nlohmann::json choice = {{"index", choices.size()},
                             {"text", sanitizeUtf8(echo + s.text)},
                             {"logprobs", nullptr},
                             {"finish_reason", finishReasonJson(s.finishReason)}};
    if (request.logprobs)
      choice["logprobs"] = completionLogprobsJson(s.tokenIds, s.logprobs, true, echo.size(), model);
    if (request.returnTokenIds) {
      choice["prompt_token_ids"] = result.promptIds; // vLLM's place: which prompt this answers
      choice["token_ids"] = tokenIdsOrNull(request, s.tokenIds);
    }
    choices.push_back(std::move(choice));
  }
}

} // namespace

nlohmann::json completionResponse(const ResponseHeader &header, const GenerationRequest &request,
                                  const std::vector<GenerationResult> &results,
                                  const ServeModel &model) {
  nlohmann::json choices = nlohmann::json::array();
  for (size_t p = 0; p < results.size(); ++p)
    appendCompletionChoices(request, p, results[p], model, choices);
  nlohmann::json body = {{"id", header.id},       {"object", "text_completion"},
                         {"created", header.created}, {"model", header.model},
                         {"choices", choices},    {"usage", usageJson(totalUsage(results))}};
  if (request.returnTokenIds && results.size() == 1)
    body["prompt_token_ids"] = results[0].promptIds;
  return body;
}

nlohmann::json toolCallJson(const std::string &id, const ToolCall &call) {
  return {{"id", id},
          {"type", "function"},
          {"function",
           {{"name", sanitizeUtf8(call.name)}, {"arguments", sanitizeUtf8(call.arguments)}}}};
}

nlohmann::json chatFinishReasonJson(FinishReason reason, const ToolSettings &tools, bool called) {
  // A named tool_choice answers "stop", as OpenAI does; calls the model chose, "tool_calls".
  if (reason == FinishReason::kStop && called && tools.choice != ToolSettings::Choice::kNamed)
    return "tool_calls";
  return finishReasonJson(reason);
}

namespace {

// The assistant message of one sample: its text as content, or read for tool calls.
nlohmann::json chatMessage(const GenerationRequest &request, const SampleResult &s,
                           const ServeModel &model, bool &called) {
  nlohmann::json message = {{"role", "assistant"}, {"content", sanitizeUtf8(s.text)}};
  called = false;
  const ToolSettings &tools = request.tools;
  ParsedToolOutput parsed;
  if (tools.choice == ToolSettings::Choice::kNamed) {
    parsed.calls.push_back({tools.namedFunction, s.text});
  } else {
    ToolCallFormat format = toolCallFormatFor(tools, model.toolCallFormat());
    if (format == ToolCallFormat::kNone)
      return message;
    parsed = parseToolCalls(format, s.text);
    if (!tools.parallel && parsed.calls.size() > 1)
      parsed.calls.resize(1);
  }
  message["content"] = parsed.content ? nlohmann::json(sanitizeUtf8(*parsed.content)) : nullptr;
  if (parsed.calls.empty())
    return message;
  called = true;
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCall &call : parsed.calls)
    calls.push_back(toolCallJson(newToolCallId(model.toolCallFormat()), call));
  message["tool_calls"] = std::move(calls);
  return message;
}

} // namespace

nlohmann::json chatResponse(const ResponseHeader &header, const GenerationRequest &request,
                            const GenerationResult &result, const ServeModel &model) {
  nlohmann::json choices = nlohmann::json::array();
  for (size_t i = 0; i < result.samples.size(); ++i) {
    const SampleResult &s = result.samples[i];
    bool called = false;
    nlohmann::json message = chatMessage(request, s, model, called);
    nlohmann::json choice = {
        {"index", i},
        {"message", std::move(message)},
        {"logprobs", nullptr},
        {"finish_reason", chatFinishReasonJson(s.finishReason, request.tools, called)}};
    if (request.logprobs)
      choice["logprobs"] = chatLogprobsJson(s.tokenIds, s.logprobs, model);
    if (request.returnTokenIds)
      choice["token_ids"] = tokenIdsOrNull(request, s.tokenIds);
    choices.push_back(std::move(choice));
  }
  nlohmann::json body = {{"id", header.id},       {"object", "chat.completion"},
                         {"created", header.created}, {"model", header.model},
                         {"choices", choices},    {"usage", usageJson(result.usage)}};
  if (request.returnTokenIds)
    body["prompt_token_ids"] = result.promptIds;
  return body;
}

nlohmann::json completionChunk(const ResponseHeader &header, nlohmann::json choice) {
  return {{"id", header.id},
          {"object", "text_completion"},
          {"created", header.created},
          {"model", header.model},
          {"choices", nlohmann::json::array({std::move(choice)})}};
}

nlohmann::json chatChunk(const ResponseHeader &header, nlohmann::json choice) {
  return {{"id", header.id},
          {"object", "chat.completion.chunk"},
          {"created", header.created},
          {"model", header.model},
          {"choices", nlohmann::json::array({std::move(choice)})}};
}

nlohmann::json usageChunk(const ResponseHeader &header, const char *object, const Usage &usage) {
  return {{"id", header.id},           {"object", object},
          {"created", header.created}, {"model", header.model},
          {"choices", nlohmann::json::array()}, {"usage", usageJson(usage)}};
}

} // namespace kiln::rt::serve
