// Engine counters for /metrics: written by the engine thread only, read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::rt {

struct HistogramSnapshot {
  std::vector<double> upperBounds; // seconds; an implicit +Inf bucket follows
  std::vector<uint64_t> counts;    // per bucket (not cumulative), upperBounds.size() + 1
  uint64_t count = 0;
  double sumSeconds = 0;
};

// Fixed buckets, lock-free observe.
class Histogram {
public:
  explicit Histogram(std::vector<double> upperBounds);
  void observe(double seconds);
  HistogramSnapshot snapshot() const;

private:
  std::vector<double> upperBounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sumNanos_{0};
};

struct MetricsSnapshot {
  int32_t numRunning = 0;
  int32_t numWaiting = 0;
  int32_t kvBlocksUsed = 0;
  int32_t kvBlocksTotal = 0;
  double kvUsage = 0; // kvBlocksUsed / kvBlocksTotal
  uint64_t steps = 0;
  uint64_t promptTokens = 0;     // prompt lengths of accepted requests
  uint64_t generationTokens = 0; // sampled tokens
  uint64_t computedTokens = 0;   // tokens run through the model (prefill, recompute, decode)
  uint64_t cachedTokens = 0;     // tokens served from the prefix cache at admission
  uint64_t preemptions = 0;
  uint64_t requestsFinished = 0;
  uint64_t requestsAborted = 0;
  uint64_t requestsFailed = 0;
  uint64_t failedSteps = 0;
  HistogramSnapshot timeToFirstToken;
  HistogramSnapshot interTokenLatency;
};

class EngineMetrics {
public:
  EngineMetrics();
  MetricsSnapshot snapshot() const;

  std::atomic<int32_t> numRunning{0};
  std::atomic<int32_t> numWaiting{0};
  std::atomic<int32_t> kvBlocksUsed{0};
  std::atomic<int32_t> kvBlocksTotal{0};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> promptTokens{0};
  std::atomic<uint64_t> generationTokens{0};
  std::atomic<uint64_t> computedTokens{0};
  std::atomic<uint64_t> cachedTokens{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<uint64_t> requestsFinished{0};
  std::atomic<uint64_t> requestsAborted{0};
  std::atomic<uint64_t> requestsFailed{0};
  std::atomic<uint64_t> failedSteps{0};
  Histogram timeToFirstToken;
  Histogram interTokenLatency;
};

} // namespace kiln::rt
