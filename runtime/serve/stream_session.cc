#include "runtime/serve/stream_session.h"

namespace kiln::rt::serve {

StreamSession::StreamSession(Engine &engine, RequestHandle handle,
                             std::unique_ptr<StreamFormatter> formatter,
                             std::vector<int32_t> promptIds, int32_t n)
    : engine_(engine), handle_(std::move(handle)), formatter_(std::move(formatter)) {
  result_.promptIds = std::move(promptIds);
  result_.samples.resize(std::max(n, 1));
}

StreamSession::~StreamSession() {
  if (!done_) {
    (void)engine_.cancel(handle_.id);
    finish();
  }
}

void StreamSession::finish() {
  if (done_)
    return;
  done_ = true;
  if (onFinished_)
    onFinished_(result_, clientGone_);
}

StreamSession::Pump StreamSession::clientGone() {
  clientGone_ = true;
  // NOT_FOUND just means the request finished meanwhile; either way nothing is left to free.
  (void)engine_.cancel(handle_.id);
  for (SampleResult &sample : result_.samples)
    if (sample.finishReason == FinishReason::kNone)
      sample.finishReason = FinishReason::kAbort;
  finish();
  return Pump::kClientGone;
}

StreamSession::Pump StreamSession::pump(const StreamWriter &write, const LivenessCheck &alive,
                                        const std::function<void()> &beforeLastWrite,
                                        std::chrono::milliseconds poll) {
  if (done_)
    return clientGone_ ? Pump::kClientGone : Pump::kDone;
  std::string chunk;
  if (!begun_) {
    begun_ = true;
    chunk = formatter_->begin();
  }
  std::optional<RequestOutput> output = handle_.stream->nextFor(poll);
  if (!output) {
    if (!chunk.empty() && !write(chunk))
      return clientGone();
    if (handle_.stream->finished()) {
      // Closed without a final output (the engine stopped): end the stream well-formed anyway.
      if (beforeLastWrite)
        beforeLastWrite();
      if (!write(formatter_->end(result_)))
        return clientGone();
      finish();
      return Pump::kDone;
    }
    return alive() ? Pump::kMore : clientGone();
  }
  applyOutput(result_, *output);
  chunk += formatter_->output(*output, result_);
  if (output->requestFinished) {
    chunk += formatter_->end(result_);
    if (beforeLastWrite)
      beforeLastWrite();
  }
  if (!chunk.empty() && !write(chunk))
    return clientGone();
  if (output->requestFinished) {
    finish();
    return Pump::kDone;
  }
  return Pump::kMore;
}

} // namespace kiln::rt::serve
