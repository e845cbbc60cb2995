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

// {"generated_text", "details"?} (details only when asked for).
nlohmann::json tgiGenerateResponse(const TgiContext &context, const GenerationResult &result);
// {"id","text","logprob","special"} for token `position` of the sample; `text` is the text the
// engine released with it.
nlohmann::json tgiTokenJson(const TgiContext &context, int32_t id, const std::string &text,
                            const TokenLogprobs *logprobs);
// TGI's top_tokens entry for one position: [{"id","text","logprob","special"}, ...].
nlohmann::json tgiTopTokensJson(const TgiContext &context, const TokenLogprobs &logprobs);
// One /generate_stream event: "generated_text" and "details" are set on the last one only.
nlohmann::json tgiStreamEvent(const TgiContext &context, int64_t index, nlohmann::json token,
                              nlohmann::json topTokens, const SampleResult *finished);
// LMI's JSON line: {"token":{"id","text","log_prob"}} plus "generated_text" (and "details"
// when asked for) on the last line.
nlohmann::json lmiStreamLine(const TgiContext &context, int32_t id, const std::string &text,
                             const TokenLogprobs *logprobs, const SampleResult *finished);

} // namespace kiln::rt::serve
