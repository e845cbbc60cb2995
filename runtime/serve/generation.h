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

// Encodes the prompt and fills the engine request. Errors: a "model" that is not the served one
// (404), a prompt with no room for one generated token (400 naming both numbers), an explicit max
// tokens that does not fit (400 naming the field), encoding failures (400).
std::optional<ApiError> buildEngineRequest(const GenerationRequest &request,
                                           ServeModel &model, Request &out);

// Bounds the requests in the server (running plus waiting) so a burst gets a fast 503 with
// Retry-After instead of an ever-growing queue.
class Admission {
public:
  explicit Admission(int64_t limit) : limit_(limit) {}

  // Releases its slot when destroyed.
  class Ticket {
  public:
    explicit Ticket(Admission *owner) : owner_(owner) {}
    Ticket(Ticket &&other) noexcept : owner_(other.owner_) { other.owner_ = nullptr; }
    Ticket(const Ticket &) = delete;
    Ticket &operator=(const Ticket &) = delete;
    Ticket &operator=(Ticket &&) = delete;
    ~Ticket() {
      if (owner_)
        owner_->inFlight_.fetch_sub(1);
    }

  private:
    Admission *owner_;
  };

  std::optional<Ticket> tryEnter();
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

struct GenerationResult {
  std::vector<int32_t> promptIds;
  std::vector<SampleResult> samples;
  Usage usage;
  Status error; // the first sample error (finish reason error)
  bool finished = false;
};

// Folds one engine output into `result` (grows samples as indices appear).
void applyOutput(GenerationResult &result, const RequestOutput &output);

// Blocks until the request finishes.
GenerationResult collectAll(OutputStream &stream, std::vector<int32_t> promptIds, int32_t n);

// TGI's finish reasons: "length", "eos_token" (an eos or stop id ended it), "stop_sequence".
const char *tgiFinishReason(const SampleResult &sample, const std::vector<int32_t> &eosIds,
                            const SamplingParams &sampling);

// "cmpl-..." / "chatcmpl-..." ids: unique per process.
std::string newResponseId(const char *prefix);
int64_t unixSeconds();

} // namespace kiln::rt::serve
