// Engine counters for /metrics: written by the engine thread only, read from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::rt {

struct HistogramSnapshot {
  std::vector<double> upperBounds; // an implicit +Inf bucket follows
  std::vector<uint64_t> counts;    // per bucket (not cumulative), upperBounds.size() + 1
  uint64_t count = 0;
  double sum = 0; // in the observed unit: seconds, or tokens
};

// Fixed buckets, lock-free observe. The sum is kept as a whole number of 1/unitsPerValue steps
// so that one atomic add records it: 1e9 (nanoseconds) for times, 1 for token counts, whose sum
// would overflow 64 bits of nanoseconds after some 10^10 tokens. Dividing by the exact
// unitsPerValue reads back 1.9, where multiplying by 1e-9 gives 1.9000000000000001.
class Histogram {
public:
  explicit Histogram(std::vector<double> upperBounds, double unitsPerValue = 1e9);
  void observe(double value);
  HistogramSnapshot snapshot() const;

private:
  std::vector<double> upperBounds_;
  double unitsPerValue_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sumUnits_{0};
};

// The KV cache's configuration, for kiln:cache_config_info (vLLM's vllm:cache_config_info).
// blockSize 0: no engine (nothing is rendered).
struct CacheConfigInfo {
  int32_t blockSize = 0;
  int32_t numGpuBlocks = 0; // the pool's blocks, wherever the runner keeps them
  bool enablePrefixCaching = false;
};

struct MetricsSnapshot {
  int32_t numRunning = 0;
  int32_t numWaiting = 0;
  int32_t kvBlocksUsed = 0;
  int32_t kvBlocksTotal = 0;
  double kvUsage = 0; // kvBlocksUsed / kvBlocksTotal
  uint64_t steps = 0;
  uint64_t promptTokens = 0;       // prompt lengths of accepted requests
  uint64_t generationTokens = 0;   // sampled tokens
  uint64_t computedTokens = 0;     // tokens run through the model (prefill, recompute, decode)
  uint64_t cachedTokens = 0;       // prefix-cache hits, in tokens, of admitted sequences
  uint64_t prefixCacheQueries = 0; // tokens of sequences admitted with prefix caching on
  uint64_t preemptions = 0;
  uint64_t requestsFinished = 0;
  uint64_t requestsAborted = 0;
  uint64_t requestsFailed = 0;
  uint64_t failedSteps = 0;
  HistogramSnapshot timeToFirstToken;
  HistogramSnapshot interTokenLatency;
  HistogramSnapshot requestQueueTime;
  HistogramSnapshot requestPrefillTime;
  HistogramSnapshot requestDecodeTime;
  HistogramSnapshot iterationTokens;
  CacheConfigInfo cacheConfig;
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
  std::atomic<uint64_t> prefixCacheQueries{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<uint64_t> requestsFinished{0};
  std::atomic<uint64_t> requestsAborted{0};
  std::atomic<uint64_t> requestsFailed{0};
  std::atomic<uint64_t> failedSteps{0};
  Histogram timeToFirstToken;
  Histogram interTokenLatency;
  // Per request that produced a first token, when it ends: first scheduled - queued, first
  // token - first scheduled, last token - first token (vLLM's queued, prefill and decode times).
  Histogram requestQueueTime;
  Histogram requestPrefillTime;
  Histogram requestDecodeTime;
  Histogram iterationTokens; // tokens run through the model, per step that ran it
  // Set once by EngineCore::create, before any other thread can see the engine.
  CacheConfigInfo cacheConfig;
};

} // namespace kiln::rt
