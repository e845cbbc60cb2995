// GET /metrics: the engine's counters plus the server's own (end-to-end latency, finished
// requests by reason, HTTP responses by status) in the Prometheus text format (0.0.4), named as
// vLLM names them with a "kiln:" prefix so a vLLM dashboard needs only the prefix changed.
#pragma once

#include "runtime/engine/metrics.h"
#include "runtime/engine/request.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>

namespace kiln::rt::serve {

struct ServerMetricsSnapshot {
  HistogramSnapshot e2eLatency;
  std::map<std::string, uint64_t> finishedByReason; // "stop", "length", "abort", "error"
  std::map<int, uint64_t> responsesByStatus;
  int64_t inFlight = 0;
  uint64_t cancelled = 0; // engine requests cancelled because their client went away
};

class ServerMetrics {
public:
  ServerMetrics();
  // A request that reached the engine ended; `reason` is its first sample's finish reason.
  void observeRequest(FinishReason reason, double e2eSeconds);
  void countResponse(int httpStatus);
  // Engine requests cancelled because their client disconnected (streaming or not).
  void countCancelled(int64_t requests) { cancelled_.fetch_add(static_cast<uint64_t>(requests)); }
  void setInFlight(int64_t inFlight) { inFlight_.store(inFlight); }
  ServerMetricsSnapshot snapshot() const;

private:
  Histogram e2eLatency_;
  std::atomic<uint64_t> finished_[5] = {};
  mutable std::mutex mutex_;
  std::map<int, uint64_t> responses_;
  std::atomic<int64_t> inFlight_{0};
  std::atomic<uint64_t> cancelled_{0};
};

// Escapes a label value (\\, \", \n) as the exposition format requires.
std::string escapeLabelValue(const std::string &value);

std::string renderPrometheus(const MetricsSnapshot &engine, const ServerMetricsSnapshot &server,
                             const std::string &modelName);

} // namespace kiln::rt::serve
