#include "runtime/serve/tgi_response.h"

#include "runtime/serve/json_text.h"
#include "runtime/serve/tgi_token_text.h"

#include <cstring>

namespace kiln::rt::serve {
namespace {

std::string fullText(const TgiContext &context, const std::string &generated) {
  if (!context.request->returnFullText)
    return generated;
  return context.request->prompt.text + generated;
}

nlohmann::json seedJson(const TgiContext &context) {
  const auto &seed = context.request->sampling.seed;
  return seed ? nlohmann::json(*seed) : nlohmann::json(nullptr);
}

} // namespace

nlohmann::json tgiTopTokensJson(const TgiContext &context, const TokenLogprobs &logprobs) {
  nlohmann::json top = nlohmann::json::array();
  for (const TokenLogprob &alt : logprobs.top)
    top.push_back({{"id", alt.tokenId},
                   {"text", sanitizeUtf8(context.model->tokenText(alt.tokenId))},
                   {"logprob", alt.logprob},
                   {"special", context.model->isSpecialToken(alt.tokenId)}});
  return top;
}

namespace {

nlohmann::json shortDetails(const TgiContext &context, const SampleResult &sample) {
  return {{"finish_reason", tgiFinishReason(sample, context.eosIds, context.request->sampling)},
          {"generated_tokens", sample.tokenIds.size()},
          {"seed", seedJson(context)}};
}

} // namespace

nlohmann::json tgiTokenJson(const TgiContext &context, int32_t id, const std::string &text,
                            const TokenLogprobs *logprobs) {
  return {{"id", id},
          {"text", sanitizeUtf8(text)},
          {"logprob", logprobs ? nlohmann::json(logprobs->sampled.logprob) : nlohmann::json()},
          {"special", context.model->isSpecialToken(id)}};
}

namespace {

bool endedByStopSequence(const TgiContext &context, const SampleResult &sample) {
  const char *reason = tgiFinishReason(sample, context.eosIds, context.request->sampling);
  return std::strcmp(reason, "stop_sequence") == 0;
}

} // namespace

std::string tgiGeneratedText(const TgiContext &context, const SampleResult &sample,
                             const std::string &joinedTokenTexts) {
  return endedByStopSequence(context, sample) ? joinedTokenTexts : sample.text;
}

nlohmann::json tgiGenerateResponse(const TgiContext &context, const GenerationResult &result) {
  const SampleResult &sample = result.samples.at(0);
  if (!context.request->details && !endedByStopSequence(context, sample))
    return {{"generated_text", sanitizeUtf8(fullText(context, sample.text))}};
  TgiTokenTexts texts(*context.model, result.promptIds);
  nlohmann::json tokens = nlohmann::json::array(), topTokens = nlohmann::json::array();
  for (size_t i = 0; i < sample.tokenIds.size(); ++i) {
    const TokenLogprobs *lp = i < sample.logprobs.size() ? &sample.logprobs[i] : nullptr;
    int32_t id = sample.tokenIds[i];
    bool last = i + 1 == sample.tokenIds.size();
    tokens.push_back(tgiTokenJson(context, id, texts.push(id, last), lp));
    if (lp && context.request->topLogprobs > 0)
      topTokens.push_back(tgiTopTokensJson(context, *lp));
  }
  std::string generated = tgiGeneratedText(context, sample, texts.joined());
  nlohmann::json body = {{"generated_text", sanitizeUtf8(fullText(context, generated))}};
  if (!context.request->details)
    return body;
  nlohmann::json details = shortDetails(context, sample);
  details["prefill"] = nlohmann::json::array();
  details["tokens"] = std::move(tokens);
  if (context.request->topLogprobs > 0)
    details["top_tokens"] = std::move(topTokens);
  body["details"] = std::move(details);
  return body;
}

nlohmann::json tgiStreamEvent(const TgiContext &context, int64_t index, nlohmann::json token,
                              nlohmann::json topTokens, const SampleResult *finished,
                              const std::string &joinedTokenTexts) {
  nlohmann::json event = {{"index", index},
                          {"token", std::move(token)},
                          {"top_tokens", std::move(topTokens)},
                          {"generated_text", nullptr},
                          {"details", nullptr}};
  if (finished) {
    std::string generated = tgiGeneratedText(context, *finished, joinedTokenTexts);
    event["generated_text"] = sanitizeUtf8(fullText(context, generated));
    event["details"] = shortDetails(context, *finished);
  }
  return event;
}

nlohmann::json lmiStreamLine(const TgiContext &context, int32_t id, const std::string &text,
                             const TokenLogprobs *logprobs, const SampleResult *finished) {
  nlohmann::json line = {
      {"token",
       {{"id", id},
        {"text", sanitizeUtf8(text)},
        {"log_prob", logprobs ? nlohmann::json(logprobs->sampled.logprob) : nlohmann::json()}}}};
  if (finished) {
    line["generated_text"] = sanitizeUtf8(fullText(context, finished->text));
    if (context.request->details)
      line["details"] = shortDetails(context, *finished);
  }
  return line;
}

} // namespace kiln::rt::serve
