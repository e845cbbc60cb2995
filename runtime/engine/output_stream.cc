#include "runtime/engine/output_stream.h"

namespace kiln::rt {

const char *finishReasonName(FinishReason reason) {
  switch (reason) {
  case FinishReason::kNone:
    return "";
  case FinishReason::kStop:
    return "stop";
  case FinishReason::kLength:
    return "length";
  case FinishReason::kAbort:
    return "abort";
  case FinishReason::kError:
    return "error";
  }
  return "";
}

void OutputSignal::notify() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
  }
  changed_.notify_all();
}

uint64_t OutputSignal::generation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

void OutputSignal::waitChanged(uint64_t seen,
                               std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiting_;
  changed_.wait_until(lock, deadline, [&] { return generation_ != seen; });
  --waiting_;
}

int OutputSignal::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

void OutputStream::push(RequestOutput output) {
  std::shared_ptr<OutputSignal> signal;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(output));
    signal = signal_;
  }
  ready_.notify_all();
  if (signal)
    signal->notify();
}

void OutputStream::close() {
  std::shared_ptr<OutputSignal> signal;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    signal = signal_;
  }
  ready_.notify_all();
  if (signal)
    signal->notify();
}

void OutputStream::setSignal(std::shared_ptr<OutputSignal> signal) {
  std::lock_guard<std::mutex> lock(mutex_);
  signal_ = std::move(signal);
}

std::optional<RequestOutput> OutputStream::popLocked() {
  if (queue_.empty())
    return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<RequestOutput> OutputStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
  return popLocked();
}

std::optional<RequestOutput> OutputStream::nextFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; });
  return popLocked();
}

std::optional<RequestOutput> OutputStream::tryNext() {
  std::lock_guard<std::mutex> lock(mutex_);
  return popLocked();
}

std::vector<RequestOutput> OutputStream::drainAll() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return closed_; });
  std::vector<RequestOutput> all(std::make_move_iterator(queue_.begin()),
                                 std::make_move_iterator(queue_.end()));
  queue_.clear();
  return all;
}

bool OutputStream::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_ && queue_.empty();
}

} // namespace kiln::rt
