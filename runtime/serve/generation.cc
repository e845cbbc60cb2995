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
    if (!model.hasChatTemplate())
      return badRequest(prompt.field, kNoChatTemplateMessage);
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

// "the prompt" for a request's only prompt; "prompt[2]" for one of a batch.
std::string promptName(const PromptInput &prompt) {
  return prompt.field.find('[') == std::string::npos ? "the prompt" : prompt.field;
}

// Checked here rather than left to Engine::submit so a batch fails before any prompt runs.
std::optional<ApiError> checkVocabulary(const PromptInput &prompt, const std::vector<int32_t> &ids,
                                        const EngineLimits &limits) {
  for (int32_t id : ids)
    if (id < 0 || id >= limits.vocabSize)
      return badRequest(prompt.field, "field '" + prompt.field + "' holds token id " +
                                          std::to_string(id) + ", outside the vocabulary [0, " +
                                          std::to_string(limits.vocabSize) + ")");
  return std::nullopt;
}

std::optional<ApiError> checkLengths(const GenerationRequest &request, const PromptInput &prompt,
                                     const EngineLimits &limits, Request &out) {
  int64_t promptLen = static_cast<int64_t>(out.promptIds.size());
  int64_t maxSeqLen = limits.maxSeqLen;
  std::string name = promptName(prompt);
  if (promptLen >= maxSeqLen)
    return badRequest(prompt.field, name + " has " + std::to_string(promptLen) +
                                        " tokens; the model's maximum sequence length is " +
                                        std::to_string(maxSeqLen) +
                                        " (room for the prompt plus at least one "
                                        "generated token)");
  int64_t room = maxSeqLen - promptLen;
  if (out.sampling.maxTokens && *out.sampling.maxTokens > room)
    return badRequest(request.maxTokensField,
                      "field '" + request.maxTokensField + "' is " +
                          std::to_string(*out.sampling.maxTokens) + " but " + name + " has " +
                          std::to_string(promptLen) +
                          " tokens and the model's maximum sequence "
                          "length is " +
                          std::to_string(maxSeqLen) + ": at most " + std::to_string(room) +
                          " tokens can be generated");
  if (!out.sampling.maxTokens && request.defaultMaxTokens)
    out.sampling.maxTokens =
        static_cast<int32_t>(std::min<int64_t>(*request.defaultMaxTokens, room));
  if (out.sampling.minTokens > room)
    return badRequest("min_tokens", "field 'min_tokens' is " +
                                        std::to_string(out.sampling.minTokens) + "; at most " +
                                        std::to_string(room) + " tokens fit after " + name);
  return std::nullopt;
}

// The engine runs a request's `n` samples side by side, so `n` is bounded by the running batch
// (EngineLimits::maxSamplesPerRequest) as well as by the parser's kMaxSamples.
std::optional<ApiError> checkSampleCount(const GenerationRequest &request,
                                         const EngineLimits &limits) {
  int32_t n = request.sampling.n;
  if (n <= limits.maxSamplesPerRequest)
    return std::nullopt;
  return badRequest("n", "field 'n' is " + std::to_string(n) + "; this server runs at most " +
                             std::to_string(limits.maxSamplesPerRequest) +
                             " samples per request (its max batch: kiln serve --max-batch, "
                             "kiln compile --max-batch)");
}

} // namespace

std::optional<ApiError> buildEngineRequest(const GenerationRequest &request,
                                           const PromptInput &prompt, ServeModel &model,
                                           Request &out) {
  if (!request.model.empty() && request.model != model.name())
    return modelNotFound(request.model, model.name());
  if (!model.generates())
    return badRequest("", "model '" + model.name() +
                              "' is an embedding model: it embeds text (/v1/embeddings, /embed, "
                              "/invocations) and cannot generate");
  if (auto error = checkSampleCount(request, model.engine().limits()))
    return error;
  out.sampling = request.sampling;
  out.grammar = request.grammar;
  if (auto error = encodePrompt(prompt, model, out.promptIds))
    return error;
  const EngineLimits &limits = model.engine().limits();
  if (auto error = checkVocabulary(prompt, out.promptIds, limits))
    return error;
  return checkLengths(request, prompt, limits, out);
}

std::optional<ApiError> buildEngineRequest(const GenerationRequest &request, ServeModel &model,
                                           Request &out) {
  return buildEngineRequest(request, request.prompt, model, out);
}

std::optional<Admission::Ticket> Admission::tryEnter(int64_t count) {
  int64_t now = inFlight_.fetch_add(count) + count;
  if (now > limit_) {
    inFlight_.fetch_sub(count);
    return std::nullopt;
  }
  return Ticket(this, count);
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

Usage totalUsage(const std::vector<GenerationResult> &results) {
  Usage total;
  for (const GenerationResult &r : results) {
    total.promptTokens += r.usage.promptTokens;
    total.completionTokens += r.usage.completionTokens;
    total.cachedPromptTokens += r.usage.cachedPromptTokens;
  }
  return total;
}

bool OutputMerger::finished() const {
  return std::all_of(streams_.begin(), streams_.end(),
                     [](const auto &stream) { return stream->finished(); });
}

OutputMerger::OutputMerger(std::vector<std::shared_ptr<OutputStream>> streams)
    : streams_(std::move(streams)), signal_(std::make_shared<OutputSignal>()) {
  for (const auto &stream : streams_)
    stream->setSignal(signal_);
}

std::optional<OutputMerger::Item> OutputMerger::nextFor(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t count = streams_.size();
  for (;;) {
    // Read the generation before scanning: an output pushed after the scan changes it.
    uint64_t seen = signal_->generation();
    bool open = false;
    for (size_t k = 0; k < count; ++k) {
      size_t i = (cursor_ + k) % count;
      if (std::optional<RequestOutput> out = streams_[i]->tryNext()) {
        cursor_ = (i + 1) % count;
        return Item{i, std::move(*out)};
      }
      open = open || !streams_[i]->finished();
    }
    if (!open || std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    signal_->waitChanged(seen, deadline);
  }
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
