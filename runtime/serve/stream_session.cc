#include "runtime/serve/stream_session.h"

namespace kiln::rt::serve {
namespace {

std::vector<std::shared_ptr<OutputStream>> streamsOf(const std::vector<RequestHandle> &handles) {
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (const RequestHandle &h : handles)
    streams.push_back(h.stream);
  return streams;
}

} // namespace

StreamSession::StreamSession(Engine &engine, std::vector<RequestHandle> handles,
                             std::unique_ptr<StreamFormatter> formatter,
                             std::vector<std::vector<int32_t>> promptIds, int32_t n)
    : engine_(engine), handles_(std::move(handles)), outputs_(streamsOf(handles_)),
      formatter_(std::move(formatter)), results_(handles_.size()), unfinished_(handles_.size()) {
  for (size_t p = 0; p < results_.size(); ++p) {
    results_[p].promptIds = p < promptIds.size() ? std::move(promptIds[p]) : std::vector<int32_t>{};
    results_[p].samples.resize(std::max(n, 1));
  }
}

StreamSession::~StreamSession() {
  if (!done_)
    (void)cancelAll();
}

void StreamSession::finish() {
  if (done_)
    return;
  done_ = true;
  if (onFinished_)
    onFinished_(results_, clientGone_);
}

StreamSession::Pump StreamSession::cancelAll() {
  if (done_)
    return clientGone_ ? Pump::kClientGone : Pump::kDone;
  clientGone_ = true;
  for (size_t p = 0; p < handles_.size(); ++p) {
    GenerationResult &result = results_[p];
    if (result.finished)
      continue;
    if (engine_.cancel(handles_[p].id).isOk()) {
      result.cancelled = true;
    } else {
      // NOT_FOUND: it finished meanwhile; its last outputs are in the stream (or about to be).
      while (std::optional<RequestOutput> out = handles_[p].stream->tryNext())
        applyOutput(result, *out);
    }
    for (SampleResult &sample : result.samples)
      if (sample.finishReason == FinishReason::kNone)
        sample.finishReason = FinishReason::kAbort;
  }
  finish();
  return Pump::kClientGone;
}

StreamSession::Pump StreamSession::end(std::string chunk, const StreamWriter &write,
                                       const std::function<void()> &beforeLastWrite) {
  chunk += formatter_->end(results_);
  if (beforeLastWrite)
    beforeLastWrite();
  // An empty write would end a chunked response early (a zero-length chunk is its terminator).
  if (!chunk.empty() && !write(chunk))
    return cancelAll();
  finish();
  return Pump::kDone;
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
  std::optional<OutputMerger::Item> item = outputs_.nextFor(poll);
  if (!item) {
    // Closed without a final output (the engine stopped): end the response well-formed anyway.
    if (outputs_.finished())
      return end(std::move(chunk), write, beforeLastWrite);
    if (!chunk.empty() && !write(chunk))
      return cancelAll();
    return alive() ? Pump::kMore : cancelAll();
  }
  GenerationResult &result = results_[item->prompt];
  applyOutput(result, item->output);
  chunk += formatter_->output(item->prompt, item->output, result);
  if (item->output.requestFinished && --unfinished_ == 0)
    return end(std::move(chunk), write, beforeLastWrite);
  if (!chunk.empty() && !write(chunk))
    return cancelAll();
  return Pump::kMore;
}

} // namespace kiln::rt::serve
