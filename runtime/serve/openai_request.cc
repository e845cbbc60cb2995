#include "runtime/serve/openai_request.h"

#include "runtime/serve/json_fields.h"
#include "runtime/serve/structured_request.h"
#include "runtime/serve/tool_request.h"

#include <limits>

namespace kiln::rt::serve {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

template <typename T> void setIf(const std::optional<double> &v, T &out) {
  if (v)
    out = static_cast<T>(*v);
}

void readPenalties(JsonFields &f, SamplingParams &s) {
  std::optional<double> presence, frequency, repetition, minP;
  f.readFloat("presence_penalty", -2, 2, presence);
  f.readFloat("frequency_penalty", -2, 2, frequency);
  f.readFloat("repetition_penalty", 0, 1e6, repetition);
  f.readFloat("min_p", 0, 1, minP);
  if (repetition && *repetition <= 0)
    f.fail("repetition_penalty", "field 'repetition_penalty' must be > 0");
  setIf(presence, s.presencePenalty);
  setIf(frequency, s.frequencyPenalty);
  setIf(repetition, s.repetitionPenalty);
  setIf(minP, s.minP);
}

void readStops(JsonFields &f, SamplingParams &s) {
  f.readStringList("stop", kMaxStopStrings, s.stop);
  f.readIntList("stop_token_ids", 0, kInt32Max, s.stopTokenIds);
  std::optional<bool> ignoreEos;
  f.readBool("ignore_eos", ignoreEos);
  s.ignoreEos = ignoreEos.value_or(false);
}

// Fields OpenAI defines that kiln does not implement: rejected rather than silently ignored.
void rejectUnsupported(JsonFields &f, const GenerationRequest &out) {
  if (const nlohmann::json *bias = f.get("logit_bias"); bias && !bias->empty())
    f.fail("logit_bias", "field 'logit_bias' is not supported");
  std::optional<int64_t> bestOf;
  f.readInt("best_of", 1, kMaxSamples, bestOf);
  if (bestOf && *bestOf != out.sampling.n)
    f.fail("best_of", "field 'best_of' must equal 'n' (" + std::to_string(out.sampling.n) +
                          "); other values are not supported");
  if (f.has("suffix"))
    f.fail("suffix", "field 'suffix' is not supported");
}

void readStreamOptions(JsonFields &f, GenerationRequest &out) {
  std::optional<bool> stream;
  f.readBool("stream", stream);
  out.stream = stream.value_or(false);
  const nlohmann::json *options = f.get("stream_options");
  if (!options)
    return;
  if (!options->is_object()) {
    f.fail("stream_options",
           std::string("field 'stream_options' must be an object, got ") + jsonTypeName(*options));
    return;
  }
  if (!out.stream) {
    f.fail("stream_options", "field 'stream_options' is only allowed when 'stream' is true");
    return;
  }
  JsonFields inner(*options, f.path("stream_options."));
  std::optional<bool> includeUsage, continuous;
  inner.readBool("include_usage", includeUsage);
  inner.readBool("continuous_usage_stats", continuous);
  out.includeUsage = includeUsage.value_or(false);
  if (!inner.ok())
    f.fail(inner.error()->param.substr(f.path("").size()), inner.error()->message);
}

} // namespace

void readOpenAiSampling(JsonFields &f, GenerationRequest &out) {
  SamplingParams &s = out.sampling;
  std::optional<std::string> model;
  f.readString("model", model);
  out.model = model.value_or("");
  std::optional<int64_t> n, seed, topK, minTokens;
  f.readInt("n", 1, kMaxSamples, n);
  s.n = static_cast<int32_t>(n.value_or(1));
  std::optional<double> temperature, topP;
  f.readFloat("temperature", 0, 2, temperature);
  f.readFloat("top_p", 0, 1, topP);
  if (topP && *topP <= 0)
    f.fail("top_p", "field 'top_p' must be in (0, 1], got 0");
  setIf(temperature, s.temperature);
  setIf(topP, s.topP);
  f.readInt("top_k", -1, kInt32Max, topK);
  if (topK)
    s.topK = static_cast<int32_t>(*topK);
  f.readInt("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed);
  if (seed)
    s.seed = static_cast<uint64_t>(*seed);
  f.readInt("min_tokens", 0, kInt32Max, minTokens);
  s.minTokens = static_cast<int32_t>(minTokens.value_or(0));
  readPenalties(f, s);
  readStops(f, s);
  readStreamOptions(f, out);
  std::optional<bool> skipSpecial;
  f.readBool("skip_special_tokens", skipSpecial);
  s.skipSpecialTokens = skipSpecial.value_or(true);
  std::optional<bool> returnTokenIds;
  f.readBool("return_token_ids", returnTokenIds);
  out.returnTokenIds = returnTokenIds.value_or(false);
  std::optional<std::string> user;
  f.readString("user", user);
  rejectUnsupported(f, out);
}

namespace {

// One prompt: a non-empty string or a non-empty array of token ids. `field` names it in errors:
// "prompt", or "prompt[2]" inside a batch.
void readOnePrompt(JsonFields &f, const nlohmann::json &value, const std::string &field,
                   PromptInput &prompt) {
  prompt.field = field;
  if (value.is_string()) {
    prompt.kind = PromptInput::Kind::kText;
    prompt.text = value.get<std::string>();
    if (prompt.text.empty())
      f.fail(field, "field '" + field + "' is empty");
    return;
  }
  if (value.is_array()) {
    nlohmann::json holder = {{field, value}};
    JsonFields ids(holder, f.path(""));
    if (!ids.readIntList(field.c_str(), 0, kInt32Max, prompt.ids)) {
      f.fail(field, ids.error()->message);
      return;
    }
    prompt.kind = PromptInput::Kind::kIds;
    if (prompt.ids.empty())
      f.fail(field, "field '" + field + "' is empty");
    return;
  }
  f.fail(field, "field '" + field + "' must be a string or an array of token ids, got " +
                    jsonTypeName(value));
}

// A batch: every item the same kind as the first (all strings or all id arrays), at most
// kMaxPrompts of them.
void readPromptBatch(JsonFields &f, const nlohmann::json &items, GenerationRequest &out) {
  if (items.size() > kMaxPrompts) {
    f.fail("prompt", "field 'prompt' holds " + std::to_string(items.size()) + " prompts; at most " +
                         std::to_string(kMaxPrompts) + " are allowed in one request");
    return;
  }
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].type() != items[0].type()) {
      f.fail("prompt", "field 'prompt' mixes kinds of prompts: prompt[0] is " +
                           std::string(jsonTypeName(items[0])) + " but prompt[" +
                           std::to_string(i) + "] is " + jsonTypeName(items[i]) +
                           "; send only strings or only arrays of token ids");
      return;
    }
  }
  // A one-prompt batch answers exactly like the bare prompt, errors included.
  bool single = items.size() == 1;
  out.extraPrompts.resize(items.size() - 1);
  for (size_t i = 0; i < items.size() && f.ok(); ++i)
    readOnePrompt(f, items[i], single ? "prompt" : "prompt[" + std::to_string(i) + "]",
                  i == 0 ? out.prompt : out.extraPrompts[i - 1]);
}

// "prompt": a string, an array of token ids, or an array of either (a batch: OpenAI's and vLLM's
// several prompts in one request, each answered with `n` choices).
void readPrompt(JsonFields &f, GenerationRequest &out) {
  const nlohmann::json *p = f.get("prompt");
  if (!p) {
    f.fail("prompt", "field 'prompt' is required");
    return;
  }
  if (p->is_array() && p->empty()) {
    f.fail("prompt", "field 'prompt' is an empty array; send a string, an array of token ids, "
                     "or a non-empty array of either");
    return;
  }
  if (p->is_array() && ((*p)[0].is_string() || (*p)[0].is_array()))
    readPromptBatch(f, *p, out);
  else
    readOnePrompt(f, *p, "prompt", out.prompt);
}

} // namespace

void checkMinTokens(JsonFields &f, const char *minField, const GenerationRequest &out) {
  const SamplingParams &s = out.sampling;
  if (s.maxTokens && s.minTokens > *s.maxTokens)
    f.fail(minField, "field '" + f.path(minField) + "' (" + std::to_string(s.minTokens) +
                         ") must be <= '" + out.maxTokensField + "' (" +
                         std::to_string(*s.maxTokens) + ")");
}

std::optional<ApiError> parseCompletionRequest(const nlohmann::json &body, GenerationRequest &out,
                                               const std::string *rawBody) {
  JsonFields f(body);
  readPrompt(f, out);
  readOpenAiSampling(f, out);
  std::optional<int64_t> maxTokens, logprobs;
  f.readInt("max_tokens", 1, kInt32Max, maxTokens);
  if (maxTokens)
    out.sampling.maxTokens = static_cast<int32_t>(*maxTokens);
  checkMinTokens(f, "min_tokens", out);
  out.defaultMaxTokens = kDefaultCompletionMaxTokens;
  f.readInt("logprobs", 0, kMaxTopLogprobs, logprobs);
  if (logprobs) {
    out.logprobs = true;
    out.topLogprobs = static_cast<int32_t>(*logprobs);
    out.sampling.logprobs = out.topLogprobs;
  }
  std::optional<bool> echo;
  f.readBool("echo", echo);
  out.echo = echo.value_or(false);
  // OpenAI then reports the prompt's tokens in the logprobs too; the engine computes logits only
  // where it samples, so it has no prompt logprobs to give.
  if (out.echo && logprobs)
    f.fail("echo", "fields 'echo' and 'logprobs' cannot be used together: kiln does not compute "
                   "the prompt's logprobs; send one of them");
  nlohmann::ordered_json ordered; // only for a schema: parsing the body again costs every request
  if (rawBody && hasStructuredOutput(f))
    ordered = nlohmann::ordered_json::parse(*rawBody, nullptr, false);
  readStructuredOutput(f, ordered.is_object() ? &ordered : nullptr, out);
  return f.error();
}

} // namespace kiln::rt::serve

namespace kiln::rt::serve {
namespace {

// The model is text-only: a content part must be {"type": "text", "text": "..."}. Images, audio
// and files are refused rather than dropped, so the model never answers a prompt it did not see.
void checkContentParts(JsonFields &f, const nlohmann::ordered_json &parts, const std::string &at) {
  for (size_t j = 0; j < parts.size() && f.ok(); ++j) {
    const auto &part = parts[j];
    std::string here = at + ".content[" + std::to_string(j) + "]";
    auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || !type->is_string()) {
      f.fail(here, "field '" + here + "' must be an object with a string 'type'");
    } else if (*type != "text") {
      f.fail(here + ".type", "field '" + here + ".type' is '" + type->get<std::string>() +
                                 "': this server serves a text-only model; the supported content "
                                 "part type is 'text'");
    } else if (auto text = part.find("text"); text == part.end() || !text->is_string()) {
      f.fail(here + ".text", "field '" + here + ".text' must be a string");
    }
  }
}

// Each message is an object with a string "role" and a "content" that is a string, an array of
// content parts, or null (an assistant turn carrying tool calls).
void checkMessages(JsonFields &f, const nlohmann::ordered_json &messages) {
  if (!messages.is_array() || messages.empty()) {
    f.fail("messages", "field 'messages' must be a non-empty array of message objects");
    return;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto &m = messages[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      f.fail(at, "field '" + at + "' must be an object with 'role' and 'content'");
      return;
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      f.fail(at + ".role", "field '" + at + ".role' must be a string");
      return;
    }
    auto content = m.find("content");
    bool okContent =
        content == m.end() || content->is_string() || content->is_array() || content->is_null();
    if (!okContent) {
      f.fail(at + ".content",
             "field '" + at + ".content' must be a string, an array of content parts or null");
      return;
    }
    if (content != m.end() && content->is_array())
      checkContentParts(f, *content, at);
    if (!f.ok())
      return;
  }
}

void readChatLogprobs(JsonFields &f, GenerationRequest &out) {
  std::optional<bool> logprobs;
  std::optional<int64_t> top;
  f.readBool("logprobs", logprobs);
  f.readInt("top_logprobs", 0, kMaxTopLogprobs, top);
  if (top && !logprobs.value_or(false))
    f.fail("top_logprobs", "field 'top_logprobs' needs 'logprobs' set to true");
  if (logprobs.value_or(false)) {
    out.logprobs = true;
    out.topLogprobs = static_cast<int32_t>(top.value_or(0));
    out.sampling.logprobs = out.topLogprobs;
  }
}

// The fields that reach the template are checked on the sorted body (`f`) and taken from the
// client-ordered one.
void readChatTemplateOptions(JsonFields &f, const nlohmann::ordered_json &ordered,
                             GenerationRequest &out) {
  std::optional<bool> addGenerationPrompt;
  f.readBool("add_generation_prompt", addGenerationPrompt);
  out.prompt.addGenerationPrompt = addGenerationPrompt.value_or(true);
  out.prompt.chatExtra = nlohmann::ordered_json::object();
  if (const nlohmann::json *kwargs = f.get("chat_template_kwargs")) {
    if (!kwargs->is_object())
      f.fail("chat_template_kwargs", "field 'chat_template_kwargs' must be an object");
    else
      for (const auto &[key, value] : ordered["chat_template_kwargs"].items())
        out.prompt.chatExtra[key] = value;
  }
  readStructuredOutput(f, &ordered, out);
  if (f.ok())
    readTools(f, ordered, out);
}

} // namespace

std::optional<ApiError> parseChatRequest(const nlohmann::json &body, const std::string &rawBody,
                                         GenerationRequest &out) {
  JsonFields f(body);
  // `body` parsed, so this parses too and is an object with the same members.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(rawBody, nullptr, false);
  if (!ordered.is_object())
    return badRequest("", "the request body must be a JSON object");
  if (!f.has("messages"))
    f.fail("messages", "field 'messages' is required");
  else
    checkMessages(f, ordered["messages"]);
  out.prompt.kind = PromptInput::Kind::kChat;
  out.prompt.field = "messages";
  out.prompt.messages = ordered.value("messages", nlohmann::ordered_json());
  toolArgumentsAsObjects(out.prompt.messages);
  readOpenAiSampling(f, out);
  std::optional<int64_t> maxTokens, maxCompletionTokens;
  f.readInt("max_tokens", 1, kInt32Max, maxTokens);
  f.readInt("max_completion_tokens", 1, kInt32Max, maxCompletionTokens);
  if (maxCompletionTokens) {
    out.sampling.maxTokens = static_cast<int32_t>(*maxCompletionTokens);
    out.maxTokensField = "max_completion_tokens";
  } else if (maxTokens) {
    out.sampling.maxTokens = static_cast<int32_t>(*maxTokens);
  }
  checkMinTokens(f, "min_tokens", out);
  readChatLogprobs(f, out);
  readChatTemplateOptions(f, ordered, out);
  return f.error();
}

} // namespace kiln::rt::serve
