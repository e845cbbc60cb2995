// A request's outputs as a thread-safe queue: the engine thread pushes, the caller blocks or
// polls. Closed after the request's last output; reads then drain what is left.
#pragma once

#include "runtime/engine/request.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace kiln::rt {

// A wake-up shared by several streams, so one reader can wait for whichever of them gets an
// output first (the prompts of a batched request) without polling. Read generation(), check the
// streams, then waitChanged(generation): a push between the two is never missed.
class OutputSignal {
public:
  void notify();
  uint64_t generation() const;
  // Returns when generation() differs from `seen` or at `deadline`, whichever comes first.
  void waitChanged(uint64_t seen, std::chrono::steady_clock::time_point deadline) const;
  // Readers blocked in waitChanged now. The count changes under the mutex the wait releases, so a
  // reader counted here is asleep on the condition variable: only notify() can wake it before its
  // deadline (tests/runtime/engine/output_stream_test.cc relies on this to test the wake-up).
  int waiting() const;

private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  uint64_t generation_ = 0;
  mutable int waiting_ = 0;
};

class OutputStream {
public:
  void push(RequestOutput output);
  void close();

  // Blocks until an output is available; nullopt once closed and drained.
  std::optional<RequestOutput> next();
  // Like next() but gives up after `timeout` (nullopt; check finished() to tell the cases apart).
  std::optional<RequestOutput> nextFor(std::chrono::milliseconds timeout);
  std::optional<RequestOutput> tryNext();
  // Blocks until closed; returns everything not yet read.
  std::vector<RequestOutput> drainAll();
  // Closed and nothing left to read.
  bool finished() const;
  // Also notifies `signal` on every push and on close (one signal per stream at most).
  void setSignal(std::shared_ptr<OutputSignal> signal);

private:
  std::optional<RequestOutput> popLocked();

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool closed_ = false;
  std::shared_ptr<OutputSignal> signal_;
};

} // namespace kiln::rt
