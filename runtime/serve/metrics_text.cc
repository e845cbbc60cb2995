#include "runtime/serve/metrics_text.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace kiln::rt::serve {
namespace {

// vLLM's e2e request latency buckets.
std::vector<double> e2eBuckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// The shortest text that reads back as the same double (0.005, not 0.0050000000000000001), as
// Prometheus' own clients print bucket bounds and values.
std::string number(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return ec == std::errc() ? std::string(buffer, end) : std::string("NaN");
}

class Writer {
public:
  explicit Writer(const std::string &modelName)
      : label_("model_name=\"" + escapeLabelValue(modelName) + "\"") {}

  void header(const std::string &name, const char *type, const char *help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void sample(const std::string &name, double value, const std::string &extraLabels = "") {
    out_ << name << "{" << label_ << extraLabels << "} " << number(value) << "\n";
  }
  void gauge(const std::string &name, double value, const char *help) {
    header(name, "gauge", help);
    sample(name, value);
  }
  void counter(const std::string &name, double value, const char *help) {
    header(name, "counter", help);
    sample(name, value);
  }
  void histogram(const std::string &name, const HistogramSnapshot &h, const char *help) {
    header(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.upperBounds.size(); ++i) {
      cumulative += i < h.counts.size() ? h.counts[i] : 0;
      sample(name + "_bucket", static_cast<double>(cumulative),
             ",le=\"" + number(h.upperBounds[i]) + "\"");
    }
    sample(name + "_bucket", static_cast<double>(h.count), ",le=\"+Inf\"");
    sample(name + "_sum", h.sum);
    sample(name + "_count", static_cast<double>(h.count));
  }
  std::string str() const { return out_.str(); }

private:
  std::string label_;
  std::ostringstream out_;
};

// vLLM's info metric: a gauge fixed at 1 whose labels carry the configuration, printed as vLLM
// prints them (Python's str(): True/False). The KV cache holds the activations' dtype, which is
// what vLLM's cache_dtype "auto" means.
void writeCacheConfig(Writer &w, const CacheConfigInfo &c) {
  if (c.blockSize == 0)
    return; // no engine
  w.header("kiln:cache_config_info", "gauge",
           "Information of the KV cache configuration (vLLM's CacheConfig); always 1.");
  w.sample("kiln:cache_config_info", 1,
           ",block_size=\"" + std::to_string(c.blockSize) + "\",cache_dtype=\"auto\"" +
               ",enable_prefix_caching=\"" + (c.enablePrefixCaching ? "True" : "False") +
               "\",num_gpu_blocks=\"" + std::to_string(c.numGpuBlocks) + "\"");
}

void writeEngine(Writer &w, const MetricsSnapshot &e) {
  w.gauge("kiln:num_requests_running", e.numRunning, "Number of requests in the running batch.");
  w.gauge("kiln:num_requests_waiting", e.numWaiting, "Number of requests waiting to be scheduled.");
  w.gauge("kiln:kv_cache_usage_perc", e.kvUsage, "KV cache usage; 1 means 100 percent.");
  w.gauge("kiln:gpu_cache_usage_perc", e.kvUsage,
          "KV cache usage; 1 means 100 percent (vLLM's older name).");
  w.gauge("kiln:kv_cache_blocks_used", e.kvBlocksUsed, "KV cache blocks held by requests.");
  w.gauge("kiln:kv_cache_blocks_total", e.kvBlocksTotal, "KV cache blocks in the pool.");
  w.counter("kiln:prompt_tokens_total", static_cast<double>(e.promptTokens),
            "Prompt tokens of accepted requests.");
  w.counter("kiln:generation_tokens_total", static_cast<double>(e.generationTokens),
            "Generated tokens.");
  w.counter("kiln:prefix_cache_queries_total", static_cast<double>(e.prefixCacheQueries),
            "Prefix cache queries, in terms of number of queried tokens.");
  w.counter("kiln:prefix_cache_hits_total", static_cast<double>(e.cachedTokens),
            "Prefix cache hits, in terms of number of cached tokens.");
  w.counter("kiln:num_preemptions_total", static_cast<double>(e.preemptions),
            "Requests preempted (recomputed later).");
  w.counter("kiln:engine_steps_total", static_cast<double>(e.steps), "Engine steps run.");
  w.histogram("kiln:time_to_first_token_seconds", e.timeToFirstToken,
              "Histogram of time to first token in seconds.");
  w.histogram("kiln:inter_token_latency_seconds", e.interTokenLatency,
              "Histogram of inter-token latency in seconds.");
  w.histogram("kiln:time_per_output_token_seconds", e.interTokenLatency,
              "Histogram of time per output token in seconds (vLLM's older name).");
  w.histogram("kiln:request_queue_time_seconds", e.requestQueueTime,
              "Histogram of time spent in WAITING phase for request.");
  w.histogram("kiln:request_prefill_time_seconds", e.requestPrefillTime,
              "Histogram of time spent in PREFILL phase for request.");
  w.histogram("kiln:request_decode_time_seconds", e.requestDecodeTime,
              "Histogram of time spent in DECODE phase for request.");
  w.histogram("kiln:iteration_tokens_total", e.iterationTokens,
              "Histogram of number of tokens per engine_step.");
  writeCacheConfig(w, e.cacheConfig);
}

void writeServer(Writer &w, const ServerMetricsSnapshot &s) {
  w.histogram("kiln:e2e_request_latency_seconds", s.e2eLatency,
              "Histogram of end to end request latency in seconds.");
  w.header("kiln:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto &[reason, count] : s.finishedByReason)
    w.sample("kiln:request_success_total", static_cast<double>(count),
             ",finished_reason=\"" + reason + "\"");
  w.header("kiln:http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto &[status, count] : s.responsesByStatus)
    w.sample("kiln:http_responses_total", static_cast<double>(count),
             ",status=\"" + std::to_string(status) + "\"");
  w.gauge("kiln:server_requests_in_flight", static_cast<double>(s.inFlight),
          "Generation requests admitted by the HTTP server and not yet finished.");
  w.counter("kiln:requests_cancelled_total", static_cast<double>(s.cancelled),
            "Generation requests cancelled because their client disconnected.");
}

const char *const kReasons[5] = {"none", "stop", "length", "abort", "error"};

} // namespace

ServerMetrics::ServerMetrics() : e2eLatency_(e2eBuckets()) {}

void ServerMetrics::observeRequest(FinishReason reason, double e2eSeconds) {
  e2eLatency_.observe(e2eSeconds);
  finished_[static_cast<size_t>(reason) % 5].fetch_add(1);
}

void ServerMetrics::countResponse(int httpStatus) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[httpStatus];
}

ServerMetricsSnapshot ServerMetrics::snapshot() const {
  ServerMetricsSnapshot s;
  s.e2eLatency = e2eLatency_.snapshot();
  for (size_t i = 1; i < 5; ++i)
    s.finishedByReason[kReasons[i]] = finished_[i].load();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.responsesByStatus = responses_;
  }
  s.inFlight = inFlight_.load();
  s.cancelled = cancelled_.load();
  return s;
}

std::string escapeLabelValue(const std::string &value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string renderPrometheus(const MetricsSnapshot &engine, const ServerMetricsSnapshot &server,
                             const std::string &modelName) {
  Writer w(modelName);
  writeEngine(w, engine);
  writeServer(w, server);
  return w.str();
}

} // namespace kiln::rt::serve
