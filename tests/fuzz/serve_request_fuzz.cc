// HTTP request bodies as the server parses them (runtime/serve/openai_routes.cc,
// tgi_routes.cc): parseJsonObject (UTF-8 + JSON), then the OpenAI completion or chat parser, the
// TGI parser, or SageMaker's /invocations classification followed by the parser it picks. A
// parsed chat request is rendered with a chat template, as the server does next.
//
// Input: byte 0 picks the endpoint (0 /v1/completions, 1 /v1/chat/completions, 2 /generate,
// 3 /invocations), the rest is the body. Invariants: a rejection's OpenAI and TGI error bodies
// are valid JSON; an accepted request has sampling settings the engine accepts
// (validateSamplingParams) and stays inside the documented limits.
#include "runtime/sampling/sampling_params.h"
#include "runtime/serve/api_error.h"
#include "runtime/serve/json_fields.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/tgi_request.h"
#include "runtime/text/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

#include <limits>
#include <string>

namespace {

using namespace kiln::rt::serve;

enum class Endpoint { kCompletions, kChat, kGenerate, kInvocations };

// Prints what templates commonly read from messages: string or list content, tool calls, tools.
constexpr const char *kTemplate = R"({%- if tools %}{{ tools | tojson }}{% endif -%}
{%- for m in messages -%}
<|{{ m.role }}|>{% if m.content is string %}{{ m.content }}{% elif m.content %}
{%- for part in m.content %}{{ part.text if part.text is defined else part | tojson }}{% endfor %}
{%- endif %}{% for call in m.tool_calls or [] %}{{ call.function.name }}({{ call.function.arguments | tojson }}){% endfor %}
{%- endfor -%}{% if add_generation_prompt %}<|assistant|>{% endif %})";

void checkErrorBodies(const ApiError &error) {
  for (const std::string &body : {openAiErrorBody(error), tgiErrorBody(error)}) {
    nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    KILN_FUZZ_CHECK(!parsed.is_discarded() && parsed.is_object(),
                    "an error body is not a JSON object: " + body);
  }
}

void renderChat(const GenerationRequest &request) {
  static const kiln::rt::ChatTemplate chatTemplate = [] {
    auto parsed = kiln::rt::ChatTemplate::parse(kTemplate);
    KILN_FUZZ_CHECK(parsed.isOk(), parsed.status().toString());
    return std::move(parsed).value();
  }();
  const PromptInput &prompt = request.prompt;
  KILN_FUZZ_CHECK(prompt.messages.is_array(), "a chat request whose messages are not an array");
  auto text = chatTemplate.renderChat(prompt.messages, prompt.addGenerationPrompt,
                                      {{"bos_token", "<s>"}}, prompt.chatExtra);
  (void)text; // a template error is a 400 for the client, not a crash
}

void checkAccepted(const GenerationRequest &request) {
  kiln::Status valid = kiln::rt::validateSamplingParams(
      request.sampling, std::numeric_limits<int32_t>::max(), kMaxTopLogprobs);
  KILN_FUZZ_CHECK(valid.isOk(), "an accepted request the engine rejects: " + valid.toString());
  KILN_FUZZ_CHECK(request.promptCount() <= kMaxPrompts, "too many prompts accepted");
  KILN_FUZZ_CHECK(request.sampling.stop.size() <= kMaxStopStrings, "too many stop strings");
  KILN_FUZZ_CHECK(request.topLogprobs >= 0 && request.topLogprobs <= kMaxTopLogprobs,
                  "top_logprobs out of range");
  KILN_FUZZ_CHECK(request.sampling.n >= 1 && request.sampling.n <= kMaxSamples, "n out of range");
  if (request.prompt.kind == PromptInput::Kind::kChat)
    renderChat(request);
}

std::optional<ApiError> parse(Endpoint endpoint, const nlohmann::json &body, const std::string &raw,
                              GenerationRequest &request) {
  switch (endpoint) {
  case Endpoint::kCompletions:
    return parseCompletionRequest(body, request);
  case Endpoint::kChat:
    return parseChatRequest(body, raw, request);
  case Endpoint::kGenerate:
    return parseTgiRequest(body, request);
  case Endpoint::kInvocations:
    break;
  }
  InvocationKind kind;
  if (auto error = classifyInvocation(body, kind))
    return error;
  if (kind == InvocationKind::kTgi)
    return parseTgiRequest(body, request);
  if (kind == InvocationKind::kChat)
    return parseChatRequest(body, raw, request);
  return parseCompletionRequest(body, request);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const auto endpoint = static_cast<Endpoint>(data[0] % 4);
  const std::string raw(reinterpret_cast<const char *>(data) + 1, size - 1);
  nlohmann::json body;
  if (auto error = parseJsonObject(raw, body)) {
    checkErrorBodies(*error);
    return 0;
  }
  GenerationRequest request;
  if (auto error = parse(endpoint, body, raw, request)) {
    checkErrorBodies(*error);
    return 0;
  }
  checkAccepted(request);
  return 0;
}
