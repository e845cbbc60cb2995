#include "runtime/serve/metrics_text.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kiln::rt::serve {
namespace {

// Every non-comment line is "name{labels} value"; every sample's name has a TYPE line before it.
void expectWellFormed(const std::string &text) {
  std::istringstream in(text);
  std::string line, typed;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0)
      continue;
    size_t brace = line.find('{'), close = line.find("} ");
    ASSERT_NE(brace, std::string::npos) << line;
    ASSERT_NE(close, std::string::npos) << line;
    std::string name = line.substr(0, brace);
    EXPECT_EQ(name.rfind(typed, 0), 0u) << line << " after TYPE " << typed;
    EXPECT_NO_THROW((void)std::stod(line.substr(close + 2))) << line;
  }
}

TEST(MetricsTextTest, EngineAndServerMetricsInPrometheusFormat) {
  MetricsSnapshot engine;
  engine.numRunning = 3;
  engine.numWaiting = 2;
  engine.kvBlocksUsed = 5;
  engine.kvBlocksTotal = 20;
  engine.kvUsage = 0.25;
  engine.promptTokens = 100;
  engine.generationTokens = 42;
  engine.timeToFirstToken.upperBounds = {0.1, 1.0};
  engine.timeToFirstToken.counts = {2, 1, 1};
  engine.timeToFirstToken.count = 4;
  engine.timeToFirstToken.sum = 3.5;
  ServerMetrics server;
  server.observeRequest(FinishReason::kStop, 0.4);
  server.observeRequest(FinishReason::kLength, 2.0);
  server.observeRequest(FinishReason::kLength, 1.0);
  server.countResponse(200);
  server.countResponse(400);
  server.countResponse(400);
  server.countCancelled(2);
  std::string text = renderPrometheus(engine, server.snapshot(), "tiny\"model");
  expectWellFormed(text);
  const char *expected[] = {
      "# TYPE kiln:num_requests_running gauge\n",
      "kiln:num_requests_running{model_name=\"tiny\\\"model\"} 3\n",
      "kiln:num_requests_waiting{model_name=\"tiny\\\"model\"} 2\n",
      "kiln:kv_cache_usage_perc{model_name=\"tiny\\\"model\"} 0.25\n",
      "kiln:gpu_cache_usage_perc{model_name=\"tiny\\\"model\"} 0.25\n",
      "# TYPE kiln:prompt_tokens_total counter\n",
      "kiln:prompt_tokens_total{model_name=\"tiny\\\"model\"} 100\n",
      "kiln:generation_tokens_total{model_name=\"tiny\\\"model\"} 42\n",
      "# TYPE kiln:time_to_first_token_seconds histogram\n",
      "kiln:time_to_first_token_seconds_bucket{model_name=\"tiny\\\"model\",le=\"0.1\"} 2\n",
      "kiln:time_to_first_token_seconds_bucket{model_name=\"tiny\\\"model\",le=\"1\"} 3\n",
      "kiln:time_to_first_token_seconds_bucket{model_name=\"tiny\\\"model\",le=\"+Inf\"} 4\n",
      "kiln:time_to_first_token_seconds_sum{model_name=\"tiny\\\"model\"} 3.5\n",
      "kiln:time_to_first_token_seconds_count{model_name=\"tiny\\\"model\"} 4\n",
      "# TYPE kiln:inter_token_latency_seconds histogram\n",
      "# TYPE kiln:e2e_request_latency_seconds histogram\n",
      "kiln:e2e_request_latency_seconds_count{model_name=\"tiny\\\"model\"} 3\n",
      "kiln:e2e_request_latency_seconds_bucket{model_name=\"tiny\\\"model\",le=\"0.5\"} 1\n",
      "kiln:e2e_request_latency_seconds_bucket{model_name=\"tiny\\\"model\",le=\"1\"} 2\n",
      "kiln:request_success_total{model_name=\"tiny\\\"model\",finished_reason=\"length\"} 2\n",
      "kiln:request_success_total{model_name=\"tiny\\\"model\",finished_reason=\"stop\"} 1\n",
      "kiln:http_responses_total{model_name=\"tiny\\\"model\",status=\"400\"} 2\n",
      "# TYPE kiln:requests_cancelled_total counter\n",
      "kiln:requests_cancelled_total{model_name=\"tiny\\\"model\"} 2\n",
  };
  for (const char *line : expected)
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line;
}

// Bucket bounds and values print in their shortest round-trip form, as Prometheus clients print
// them: 0.005, not %.17g's 0.0050000000000000001.
TEST(MetricsTextTest, NumbersPrintInShortestRoundTripForm) {
  MetricsSnapshot engine;
  engine.kvUsage = 0.3;
  engine.timeToFirstToken.upperBounds = {0.001, 0.005, 0.02, 0.1, 2.5, 7680.0};
  engine.timeToFirstToken.counts = {0, 1, 0, 0, 0, 0, 0};
  engine.timeToFirstToken.count = 1;
  engine.timeToFirstToken.sum = 0.004;
  std::string text = renderPrometheus(engine, ServerMetrics().snapshot(), "m");
  const std::string bucket = "kiln:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"";
  for (const char *le : {"0.001", "0.005", "0.02", "0.1", "2.5", "7680"})
    EXPECT_NE(text.find(bucket + le + "\"}"), std::string::npos) << "missing le=" << le;
  EXPECT_NE(text.find("kiln:kv_cache_usage_perc{model_name=\"m\"} 0.3\n"), std::string::npos);
  EXPECT_NE(text.find("kiln:time_to_first_token_seconds_sum{model_name=\"m\"} 0.004\n"),
            std::string::npos);
  EXPECT_EQ(text.find("00000000"), std::string::npos) << text;
  // vLLM's e2e buckets, rendered by the server itself.
  EXPECT_NE(text.find("kiln:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"0.3\"} 0"),
            std::string::npos);
}

// The metric families vLLM v1 has beyond the first set: prefix-cache queries next to hits (hit
// rate = hits / queries), request phase times, tokens per step and the cache configuration,
// rendered from EngineMetrics' own buckets.
TEST(MetricsTextTest, VllmV1FamiliesRenderAsVllmDoes) {
  EngineMetrics metrics;
  metrics.prefixCacheQueries = 23;
  metrics.cachedTokens = 8;
  metrics.requestQueueTime.observe(0.7);
  metrics.requestQueueTime.observe(1.2);
  metrics.requestPrefillTime.observe(0.2);
  metrics.requestDecodeTime.observe(0.4);
  for (double tokens : {10.0, 1.0, 1.0, 5.0})
    metrics.iterationTokens.observe(tokens);
  metrics.cacheConfig = {16, 1024, true};
  std::string text = renderPrometheus(metrics.snapshot(), ServerMetrics().snapshot(), "m");
  expectWellFormed(text);
  const char *expected[] = {
      "# HELP kiln:prefix_cache_queries_total Prefix cache queries, in terms of number of "
      "queried tokens.\n# TYPE kiln:prefix_cache_queries_total counter\n"
      "kiln:prefix_cache_queries_total{model_name=\"m\"} 23\n"
      "# HELP kiln:prefix_cache_hits_total Prefix cache hits, in terms of number of cached "
      "tokens.\n# TYPE kiln:prefix_cache_hits_total counter\n"
      "kiln:prefix_cache_hits_total{model_name=\"m\"} 8\n",
      "# HELP kiln:request_queue_time_seconds Histogram of time spent in WAITING phase for "
      "request.\n# TYPE kiln:request_queue_time_seconds histogram\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.3\"} 0\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.5\"} 0\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.8\"} 1\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"1\"} 1\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"1.5\"} 2\n",
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"7680\"} 2\n"
      "kiln:request_queue_time_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 2\n"
      "kiln:request_queue_time_seconds_sum{model_name=\"m\"} 1.9\n"
      "kiln:request_queue_time_seconds_count{model_name=\"m\"} 2\n",
      "# HELP kiln:request_prefill_time_seconds Histogram of time spent in PREFILL phase for "
      "request.\n# TYPE kiln:request_prefill_time_seconds histogram\n"
      "kiln:request_prefill_time_seconds_bucket{model_name=\"m\",le=\"0.3\"} 1\n",
      "kiln:request_prefill_time_seconds_count{model_name=\"m\"} 1\n",
      "# HELP kiln:request_decode_time_seconds Histogram of time spent in DECODE phase for "
      "request.\n# TYPE kiln:request_decode_time_seconds histogram\n"
      "kiln:request_decode_time_seconds_bucket{model_name=\"m\",le=\"0.3\"} 0\n"
      "kiln:request_decode_time_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1\n",
      "kiln:request_decode_time_seconds_sum{model_name=\"m\"} 0.4\n",
      "# HELP kiln:iteration_tokens_total Histogram of number of tokens per engine_step.\n"
      "# TYPE kiln:iteration_tokens_total histogram\n"
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"1\"} 2\n"
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"8\"} 3\n"
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"16\"} 4\n"
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"32\"} 4\n",
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"16384\"} 4\n"
      "kiln:iteration_tokens_total_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"
      "kiln:iteration_tokens_total_sum{model_name=\"m\"} 17\n"
      "kiln:iteration_tokens_total_count{model_name=\"m\"} 4\n",
      "# HELP kiln:cache_config_info Information of the KV cache configuration (vLLM's "
      "CacheConfig); always 1.\n# TYPE kiln:cache_config_info gauge\n"
      "kiln:cache_config_info{model_name=\"m\",block_size=\"16\",cache_dtype=\"auto\","
      "enable_prefix_caching=\"True\",num_gpu_blocks=\"1024\"} 1\n",
  };
  for (const char *lines : expected)
    EXPECT_NE(text.find(lines), std::string::npos) << "missing:\n" << lines << "\nin:\n" << text;

  metrics.cacheConfig.enablePrefixCaching = false;
  text = renderPrometheus(metrics.snapshot(), ServerMetrics().snapshot(), "m");
  EXPECT_NE(text.find("enable_prefix_caching=\"False\""), std::string::npos);
  // No engine (no model loaded): no cache configuration to report.
  text = renderPrometheus(MetricsSnapshot{}, ServerMetrics().snapshot(), "");
  EXPECT_EQ(text.find("cache_config_info"), std::string::npos);
  EXPECT_NE(text.find("kiln:prefix_cache_queries_total{model_name=\"\"} 0\n"), std::string::npos);
}

TEST(MetricsTextTest, EscapesLabelValues) {
  EXPECT_EQ(escapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

} // namespace
} // namespace kiln::rt::serve
