// From a parsed GenerationRequest to engine outputs: encode the prompt, check it against the
// model's limits, admit it under the server's queue limit, and fold the engine's incremental
// outputs into per-sample results.
#pragma once

#include "runtime/engine/engine.h"
#include "runtime/serve/api_error.h"
#include "runtime/serve/generation_request.h"
#include "runtime/serve/serve_model.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt::serve {

// The 400 a chat request gets when the model has no chat template (vLLM answers 400 too).
inline constexpr const char *kNoChatTemplateMessage =
    "this model has no chat template; start kiln serve with --chat-template FILE";

// Encodes `prompt` (one of the request's prompts) and fills the engine request. Errors: a "model"
// that is not the served one (404), token ids outside the vocabulary (400), a prompt with no room
// for one generated token (400 naming both numbers), an explicit max tokens that does not fit (400
// naming the field), `n` above the engine's samples per request (400 naming `n`), a chat prompt
// for a model without a chat template (400), encoding failures (400). Errors about a batch's
// prompt name it ("prompt[2]").
std::optional<ApiError> buildEngineRequest(const GenerationRequest &request,
                                           const PromptInput &prompt, ServeModel &model,
                                           Request &out);
// The same for the request's first (usually only) prompt.
std::optional<ApiError> buildEngineRequest(const GenerationRequest &request,
                                           ServeModel &model, Request &out);

// Bounds the requests in the server (running plus waiting) so a burst gets a fast 503 with
// Retry-After instead of an ever-growing queue.
class Admission {
public:
  explicit Admission(int64_t limit) : limit_(limit) {}

  // Releases its slots when destroyed.
  class Ticket {
  public:
    Ticket(Admission *owner, int64_t count) : owner_(owner), count_(count) {}
    Ticket(Ticket &&other) noexcept : owner_(other.owner_), count_(other.count_) {
      other.owner_ = nullptr;
    }
    Ticket(const Ticket &) = delete;
    Ticket &operator=(const Ticket &) = delete;
    Ticket &operator=(Ticket &&) = delete;
    ~Ticket() {
      if (owner_)
        owner_->inFlight_.fetch_sub(count_);
    }

  private:
    Admission *owner_;
    int64_t count_;
  };

  // `count` slots at once (a batch of prompts counts as that many requests), or none.
  std::optional<Ticket> tryEnter(int64_t count = 1);
  int64_t inFlight() const { return inFlight_.load(); }
  int64_t limit() const { return limit_; }

private:
  int64_t limit_;
  std::atomic<int64_t> inFlight_{0};
};

struct SampleResult {
  std::string text;
  std::vector<int32_t> tokenIds;
  std::vector<TokenLogprobs> logprobs;
  FinishReason finishReason = FinishReason::kNone;
};

// One engine request's outcome: one prompt and its n samples.
struct GenerationResult {
  std::vector<int32_t> promptIds;
  std::vector<SampleResult> samples;
  Usage usage;
  Status error; // the first sample error (finish reason error)
  bool finished = false;
  bool cancelled = false; // cancelled because the client went away before it finished
};

// Folds one engine output into `result` (grows samples as indices appear).
void applyOutput(GenerationResult &result, const RequestOutput &output);

// Usage summed over a batch's prompts: each prompt's tokens counted once, as vLLM does.
Usage totalUsage(const std::vector<GenerationResult> &results);

// The outputs of a batch's engine requests (one per prompt) as one sequence, in arrival order.
// HTTP threads wait on it; the streams are only read, never the engine's state.
class OutputMerger {
public:
  struct Item {
    size_t prompt = 0;
    RequestOutput output;
  };
  explicit OutputMerger(std::vector<std::shared_ptr<OutputStream>> streams);

  // The next output of any prompt, waiting up to `timeout`; nullopt on timeout or once every
  // stream is finished (tell them apart with finished()).
  std::optional<Item> nextFor(std::chrono::milliseconds timeout);
  bool finished() const;

private:
  std::vector<std::shared_ptr<OutputStream>> streams_;
  std::shared_ptr<OutputSignal> signal_; // notified by every stream's push and close
  size_t cursor_ = 0; // where the next scan starts, so no prompt starves the others
};

// TGI's finish reasons: "length", "eos_token" (an eos or stop id ended it), "stop_sequence".
const char *tgiFinishReason(const SampleResult &sample, const std::vector<int32_t> &eosIds,
                            const SamplingParams &sampling);

// "cmpl-..." / "chatcmpl-..." ids: unique per process.
std::string newResponseId(const char *prefix);
int64_t unixSeconds();

} // namespace kiln::rt::serve
