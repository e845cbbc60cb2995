#include "runtime/serve/generation.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace kiln::rt::serve {
namespace {

std::optional<ApiError> encodePrompt(const PromptInput &prompt, const ServeModel &model,
                                     std::vector<int32_t> &ids) {
  Result<std::vector<int32_t>> encoded = std::vector<int32_t>{};
  switch (prompt.kind) {
  case PromptInput::Kind::kIds:
    ids = prompt.ids;
    return std::nullopt;
  case PromptInput::Kind::kText:
    encoded = model.encodePrompt(prompt.text);
    break;
  case PromptInput::Kind::kChat:
    encoded = model.encodeChat(prompt.messages, prompt.addGenerationPrompt, prompt.chatExtra);
    break;
  }
  if (!encoded.isOk())
    return errorFromStatus(encoded.status(), prompt.field);
  ids = std::move(encoded).value();
  if (ids.empty())
    return badRequest(prompt.field, "field '" + prompt.field + "' encodes to no tokens");
  return std::nullopt;
}

std::optional<ApiError> checkLengths(const GenerationRequest &request, const EngineLimits &limits,
                                     Request &out) {
  int64_t promptLen = static_cast<int64_t>(out.promptIds.size());
  int64_t maxSeqLen = limits.maxSeqLen;
  if (promptLen >= maxSeqLen)
    return badRequest(request.prompt.field,
                      "the prompt has " + std::to_string(promptLen) +
                          " tokens; the model's maximum sequence length is " +
                          std::to_string(maxSeqLen) + " (room for the prompt plus at least one "
                                                      "generated token)");
  int64_t room = maxSeqLen - promptLen;
  if (out.sampling.maxTokens && *out.sampling.maxTokens > room)
    return badRequest(request.maxTokensField,
                      "field '" + request.maxTokensField + "' is " +
                          std::to_string(*out.sampling.maxTokens) + " but the prompt has " +
                          std::to_string(promptLen) + " tokens and the model's maximum sequence "
                                                      "length is " +
                          std::to_string(maxSeqLen) + ": at most " + std::to_string(room) +
                          " tokens can be generated");
  if (!out.sampling.maxTokens && request.defaultMaxTokens)
    out.sampling.maxTokens = static_cast<int32_t>(
        std::min<int64_t>(*request.defaultMaxTokens, room));
  if (out.sampling.minTokens > room)
    return badRequest("min_tokens", "field 'min_tokens' is " +
                                        std::to_string(out.sampling.minTokens) + "; at most " +
                                        std::to_string(room) + " tokens fit after the prompt");
  return std::nullopt;
}

} // namespace

std::optional<ApiError> buildEngineRequest(const GenerationRequest &request,
                                           ServeModel &model, Request &out) {
  if (!request.model.empty() && request.model != model.name()) {
    ApiError error;
    error.httpStatus = 404;
    error.param = "model";
    error.code = "model_not_found";
    error.type = "NotFoundError";
    error.message = "the model '" + request.model + "' does not exist; this server serves '" +
                    model.name() + "'";
    return error;
  }
  out.sampling = request.sampling;
  if (auto error = encodePrompt(request.prompt, model, out.promptIds))
    return error;
  return checkLengths(request, model.engine().limits(), out);
}

std::optional<Admission::Ticket> Admission::tryEnter() {
  int64_t now = inFlight_.fetch_add(1) + 1;
  if (now > limit_) {
    inFlight_.fetch_sub(1);
    return std::nullopt;
  }
  return Ticket(this);
}

void applyOutput(GenerationResult &result, const RequestOutput &output) {
  if (output.index >= static_cast<int32_t>(result.samples.size()))
    result.samples.resize(output.index + 1);
  SampleResult &sample = result.samples[output.index];
  sample.text += output.text;
  sample.tokenIds.insert(sample.tokenIds.end(), output.tokenIds.begin(), output.tokenIds.end());
  sample.logprobs.insert(sample.logprobs.end(), output.logprobs.begin(), output.logprobs.end());
  if (output.finishReason != FinishReason::kNone)
    sample.finishReason = output.finishReason;
  if (output.finishReason == FinishReason::kError && result.error.isOk())
    result.error = output.error.isOk() ? internalError("generation failed") : output.error;
  if (output.requestFinished) {
    result.finished = true;
    result.usage = output.usage;
  }
}

GenerationResult collectAll(OutputStream &stream, std::vector<int32_t> promptIds, int32_t n) {
  GenerationResult result;
  result.promptIds = std::move(promptIds);
  result.samples.resize(std::max(n, 1));
  while (std::optional<RequestOutput> output = stream.next())
    applyOutput(result, *output);
  return result;
}

const char *tgiFinishReason(const SampleResult &sample, const std::vector<int32_t> &eosIds,
                            const SamplingParams &sampling) {
  if (sample.finishReason == FinishReason::kLength)
    return "length";
  if (sample.finishReason != FinishReason::kStop)
    return finishReasonName(sample.finishReason);
  if (!sample.tokenIds.empty()) {
    int32_t last = sample.tokenIds.back();
    auto in = [last](const std::vector<int32_t> &ids) {
      return std::find(ids.begin(), ids.end(), last) != ids.end();
    };
    if ((!sampling.ignoreEos && in(eosIds)) || in(sampling.stopTokenIds))
      return "eos_token";
  }
  return "stop_sequence";
}

std::string newResponseId(const char *prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t processSalt = std::random_device{}();
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%s-%08llx%08llx", prefix,
                static_cast<unsigned long long>(processSalt & 0xffffffffu),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buffer;
}

int64_t unixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace kiln::rt::serve
