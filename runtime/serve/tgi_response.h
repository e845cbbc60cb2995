// TGI response bodies (/generate, /generate_stream events) and SageMaker LMI JSON lines.
#pragma once

#include "runtime/serve/generation.h"
#include "runtime/serve/generation_request.h"
#include "runtime/serve/serve_model.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kiln::rt::serve {

// What TGI's details and final events need besides the sample.
struct TgiContext {
  const GenerationRequest *request = nullptr;
  const ServeModel *model = nullptr;
  std::vector<int32_t> eosIds;
};

// TGI's generated_text without the prompt. The engine ends the text before a stop sequence (as
// OpenAI and vLLM do); TGI keeps it, with the rest of the token that completed it. So after a
// stop sequence it is `joinedTokenTexts` (TgiTokenTexts::joined over the sample's tokens), which
// holds it; otherwise the engine's text.
std::string tgiGeneratedText(const TgiContext &context, const SampleResult &sample,
                             const std::string &joinedTokenTexts);
// {"generated_text", "details"?} (details only when asked for). details.tokens carry the same
// texts as the stream's events (tgi_token_text.h); a stop token's is its own text ("</s>").
nlohmann::json tgiGenerateResponse(const TgiContext &context, const GenerationResult &result);
// {"id","text","logprob","special"} for one generated token with its text.
nlohmann::json tgiTokenJson(const TgiContext &context, int32_t id, const std::string &text,
                            const TokenLogprobs *logprobs);
// TGI's top_tokens entry for one position: [{"id","text","logprob","special"}, ...].
nlohmann::json tgiTopTokensJson(const TgiContext &context, const TokenLogprobs &logprobs);
// One /generate_stream event: "generated_text" and "details" are set on the last one only
// (`joinedTokenTexts`: the stream's token texts so far, for tgiGeneratedText).
nlohmann::json tgiStreamEvent(const TgiContext &context, int64_t index, nlohmann::json token,
                              nlohmann::json topTokens, const SampleResult *finished,
                              const std::string &joinedTokenTexts);
// LMI's JSON line: {"token":{"id","text","log_prob"}} plus "generated_text" (and "details"
// when asked for) on the last line. LMI's texts are the engine's (a stop sequence is left out).
nlohmann::json lmiStreamLine(const TgiContext &context, int32_t id, const std::string &text,
                             const TokenLogprobs *logprobs, const SampleResult *finished);

} // namespace kiln::rt::serve
