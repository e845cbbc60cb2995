// The serving engine's public face (after TensorRT-LLM's executor: submit / await / cancel /
// shutdown). One engine thread owns the EngineCore and all mutable serving state; callers reach it
// only through the inbox (requests, cancellations) and per-request output streams.
#pragma once

#include "runtime/base/status.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/output_stream.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kiln::rt {

struct RequestHandle {
  RequestId id = 0;
  std::shared_ptr<OutputStream> stream; // closes after the request's last output
};

class Engine {
public:
  static Result<std::unique_ptr<Engine>> create(const EngineConfig &config);
  // Drains like shutdown().
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  // Validates on the caller's thread (errors name the field and limit) and queues the request.
  // Fails with UNAVAILABLE once shutdown has begun.
  Result<RequestHandle> submit(Request request);
  // The request ends with finish reason abort and its KV blocks are freed at the next step.
  // NOT_FOUND when the id is unknown or already finished.
  Status cancel(RequestId id);
  // Rejects new requests, finishes the ones in flight, stops the engine thread. Idempotent.
  void shutdown();
  // Like shutdown() but aborts the requests in flight instead of finishing them.
  void shutdownNow();

  MetricsSnapshot metrics() const { return core_->metrics().snapshot(); }
  const EngineLimits &limits() const { return core_->limits(); }

private:
  struct Pending {
    RequestId id;
    Request request;
    std::shared_ptr<OutputStream> stream;
    EngineCore::Clock::time_point arrival;
  };

  explicit Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {}
  void run();
  void route(std::vector<RequestOutput> outputs);
  void stop(bool abortInFlight);

  std::unique_ptr<EngineCore> core_;
  std::thread thread_;

  // Guarded by mutex_: what caller threads and the engine thread share.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> inbox_;
  std::vector<RequestId> cancels_;
  std::unordered_set<RequestId> live_;
  RequestId nextId_ = 1;
  bool draining_ = false;
  bool abortInFlight_ = false;

  // Engine thread only.
  std::unordered_map<RequestId, std::shared_ptr<OutputStream>> streams_;
};

} // namespace kiln::rt
