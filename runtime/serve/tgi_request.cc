#include "runtime/serve/tgi_request.h"

#include "runtime/serve/json_fields.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/structured_request.h"

#include <limits>

namespace kiln::rt::serve {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// TGI samples when do_sample is set or any warper (temperature, top_k, top_p) is given;
// otherwise it decodes greedily.
void readSamplingChoice(JsonFields &p, SamplingParams &s) {
  std::optional<bool> doSample;
  std::optional<double> temperature, topP;
  std::optional<int64_t> topK;
  p.readBool("do_sample", doSample);
  p.readFloat("temperature", 0, 100, temperature);
  p.readFloat("top_p", 0, 1, topP);
  p.readInt("top_k", 1, kInt32Max, topK);
  if (temperature && *temperature <= 0)
    p.fail("temperature", "field '" + p.path("temperature") + "' must be > 0");
  if (topP && *topP <= 0)
    p.fail("top_p", "field '" + p.path("top_p") + "' must be in (0, 1]");
  bool sample = doSample.value_or(false) || temperature || topP || topK;
  s.temperature = sample ? static_cast<float>(temperature.value_or(1.0)) : 0.0f;
  if (topP)
    s.topP = static_cast<float>(*topP);
  if (topK)
    s.topK = static_cast<int32_t>(*topK);
}

void readPenaltiesAndStops(JsonFields &p, SamplingParams &s) {
  std::optional<double> repetition, frequency, presence;
  p.readFloat("repetition_penalty", 0, 1e6, repetition);
  if (repetition && *repetition <= 0)
    p.fail("repetition_penalty", "field '" + p.path("repetition_penalty") + "' must be > 0");
  p.readFloat("frequency_penalty", -2, 2, frequency);
  p.readFloat("presence_penalty", -2, 2, presence);
  if (repetition)
    s.repetitionPenalty = static_cast<float>(*repetition);
  if (frequency)
    s.frequencyPenalty = static_cast<float>(*frequency);
  if (presence)
    s.presencePenalty = static_cast<float>(*presence);
  p.readStringList("stop", kMaxStopStrings, s.stop);
  // LMI's name for the same thing.
  if (s.stop.empty())
    p.readStringList("stop_sequences", kMaxStopStrings, s.stop);
  std::optional<bool> ignoreEos;
  p.readBool("ignore_eos", ignoreEos);
  s.ignoreEos = ignoreEos.value_or(false);
}

void readParameters(JsonFields &p, const nlohmann::ordered_json *ordered, GenerationRequest &out) {
  SamplingParams &s = out.sampling;
  readSamplingChoice(p, s);
  readPenaltiesAndStops(p, s);
  std::optional<int64_t> maxNew, seed, topN, bestOf, minTokens;
  p.readInt("max_new_tokens", 1, kInt32Max, maxNew);
  if (maxNew)
    s.maxTokens = static_cast<int32_t>(*maxNew);
  out.defaultMaxTokens = kDefaultMaxNewTokens;
  out.maxTokensField = p.path("max_new_tokens");
  p.readInt("seed", 0, std::numeric_limits<int64_t>::max(), seed);
  if (seed)
    s.seed = static_cast<uint64_t>(*seed);
  p.readInt("min_new_tokens", 0, kInt32Max, minTokens);
  s.minTokens = static_cast<int32_t>(minTokens.value_or(0));
  checkMinTokens(p, "min_new_tokens", out);
  p.readInt("top_n_tokens", 0, kMaxTopLogprobs, topN);
  std::optional<bool> details, fullText, decoderDetails, watermark;
  p.readBool("details", details);
  p.readBool("return_full_text", fullText);
  p.readBool("decoder_input_details", decoderDetails);
  p.readBool("watermark", watermark);
  out.details = details.value_or(false);
  out.returnFullText = fullText.value_or(false);
  // Token logprobs are part of TGI's details; ask the engine for them only when shown.
  out.logprobs = out.details || out.stream;
  out.topLogprobs = static_cast<int32_t>(topN.value_or(0));
  if (out.logprobs)
    s.logprobs = out.topLogprobs;
  p.readInt("best_of", 1, 1, bestOf);
  readTgiGrammar(p, ordered, out);
  if (watermark.value_or(false))
    p.fail("watermark", "field '" + p.path("watermark") + "' is not supported");
}

} // namespace

std::optional<ApiError> parseTgiRequest(const nlohmann::json &body, GenerationRequest &out,
                                        const std::string *rawBody) {
  JsonFields f(body);
  out.prompt.field = "inputs";
  const nlohmann::json *inputs = f.get("inputs");
  if (!inputs) {
    f.fail("inputs", "field 'inputs' is required");
  } else if (inputs->is_array() && inputs->size() == 1 && (*inputs)[0].is_string()) {
    out.prompt.text = (*inputs)[0].get<std::string>();
  } else if (inputs->is_array()) {
    f.fail("inputs", "field 'inputs' must be one string; send one request per prompt");
  } else if (!inputs->is_string()) {
    f.fail("inputs", std::string("field 'inputs' must be a string, got ") + jsonTypeName(*inputs));
  } else {
    out.prompt.text = inputs->get<std::string>();
  }
  if (f.ok() && out.prompt.text.empty())
    f.fail("inputs", "field 'inputs' is empty");
  std::optional<bool> stream;
  f.readBool("stream", stream);
  out.stream = stream.value_or(false);
  if (const nlohmann::json *params = f.get("parameters")) {
    if (!params->is_object()) {
      f.fail("parameters",
             std::string("field 'parameters' must be an object, got ") + jsonTypeName(*params));
    } else {
      JsonFields p(*params, "parameters.");
      nlohmann::ordered_json ordered; // only for a grammar: parsing again costs every request
      if (rawBody && p.has("grammar"))
        ordered = nlohmann::ordered_json::parse(*rawBody, nullptr, false);
      const bool keepOrder = ordered.is_object() && ordered.contains("parameters");
      readParameters(p, keepOrder ? &ordered["parameters"] : nullptr, out);
      if (!p.ok() && f.ok())
        return p.error();
    }
  } else {
    const nlohmann::json empty = nlohmann::json::object();
    JsonFields p(empty, "parameters.");
    readParameters(p, nullptr, out);
  }
  return f.error();
}

std::optional<ApiError> classifyInvocation(const nlohmann::json &body, InvocationKind &kind) {
  if (body.contains("messages"))
    kind = InvocationKind::kChat;
  else if (body.contains("prompt"))
    kind = InvocationKind::kCompletion;
  else if (body.contains("inputs"))
    kind = InvocationKind::kTgi;
  else
    return badRequest("inputs", "the body needs 'inputs' (TGI style), 'messages' (chat) or "
                                "'prompt' (completion)");
  return std::nullopt;
}

} // namespace kiln::rt::serve
