#include "runtime/engine/metrics.h"

#include <algorithm>
#include <cmath>

namespace kiln::rt {
namespace {

// Prometheus-style buckets as vLLM uses for TTFT and inter-token latency.
std::vector<double> ttftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}
std::vector<double> itlBuckets() {
  return {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
          0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};
}
// vLLM's request latency buckets, which it uses for queue, prefill and decode times too.
std::vector<double> requestTimeBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
// vLLM's vllm:iteration_tokens_total buckets.
std::vector<double> iterationTokenBuckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

} // namespace

Histogram::Histogram(std::vector<double> upperBounds, double unitsPerValue)
    : upperBounds_(std::move(upperBounds)), unitsPerValue_(unitsPerValue),
      counts_(new std::atomic<uint64_t>[upperBounds_.size() + 1]) {
  for (size_t i = 0; i <= upperBounds_.size(); ++i)
    counts_[i].store(0);
}

void Histogram::observe(double value) {
  // lower_bound: a value equal to a bound belongs to that bound's bucket (Prometheus' "le").
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upperBounds_.begin(), upperBounds_.end(), value) - upperBounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sumUnits_.fetch_add(static_cast<uint64_t>(std::llround(std::max(0.0, value) * unitsPerValue_)),
                      std::memory_order_relaxed);
}

HistogramSnapshot Histogram::snapshot() const {
  HistogramSnapshot s;
  s.upperBounds = upperBounds_;
  for (size_t i = 0; i <= upperBounds_.size(); ++i)
    s.counts.push_back(counts_[i].load(std::memory_order_relaxed));
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sumUnits_.load(std::memory_order_relaxed)) / unitsPerValue_;
  return s;
}

EngineMetrics::EngineMetrics()
    : timeToFirstToken(ttftBuckets()), interTokenLatency(itlBuckets()),
      requestQueueTime(requestTimeBuckets()), requestPrefillTime(requestTimeBuckets()),
      requestDecodeTime(requestTimeBuckets()), iterationTokens(iterationTokenBuckets(), 1.0) {}

MetricsSnapshot EngineMetrics::snapshot() const {
  MetricsSnapshot s;
  s.numRunning = numRunning.load();
  s.numWaiting = numWaiting.load();
  s.kvBlocksUsed = kvBlocksUsed.load();
  s.kvBlocksTotal = kvBlocksTotal.load();
  s.kvUsage = s.kvBlocksTotal ? static_cast<double>(s.kvBlocksUsed) / s.kvBlocksTotal : 0.0;
  s.steps = steps.load();
  s.promptTokens = promptTokens.load();
  s.generationTokens = generationTokens.load();
  s.computedTokens = computedTokens.load();
  s.cachedTokens = cachedTokens.load();
  s.prefixCacheQueries = prefixCacheQueries.load();
  s.preemptions = preemptions.load();
  s.requestsFinished = requestsFinished.load();
  s.requestsAborted = requestsAborted.load();
  s.requestsFailed = requestsFailed.load();
  s.failedSteps = failedSteps.load();
  s.timeToFirstToken = timeToFirstToken.snapshot();
  s.interTokenLatency = interTokenLatency.snapshot();
  s.requestQueueTime = requestQueueTime.snapshot();
  s.requestPrefillTime = requestPrefillTime.snapshot();
  s.requestDecodeTime = requestDecodeTime.snapshot();
  s.iterationTokens = iterationTokens.snapshot();
  s.cacheConfig = cacheConfig;
  return s;
}

} // namespace kiln::rt
