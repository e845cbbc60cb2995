// A request's outputs as a thread-safe queue: the engine thread pushes, the caller blocks or
// polls. Closed after the request's last output; reads then drain what is left.
#pragma once

#include "runtime/engine/request.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

namespace kiln::rt {

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

private:
  std::optional<RequestOutput> popLocked();

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool closed_ = false;
};

} // namespace kiln::rt
