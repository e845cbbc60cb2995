// `kiln bench ARTIFACT`: offline throughput of the serving engine. Random prompts of --input-len
// ids each generate exactly --output-len tokens (ignore_eos); all are submitted at once and the
// engine batches up to --batch. Reports requests/s, output and total tokens/s, TTFT and
// inter-token latency (mean, p50, p99) and a batch-1 decode rate; --ttft-len adds the time to first
// token of one long prompt alone. --json prints one JSON object (fields: docs/benchmarks.md).
#include "runtime/hal/cpu_device.h"
#include "runtime/service/serving_model.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <thread>

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Each request gets a reader thread so token arrival times are taken when the engine emits them.
constexpr int64_t kMaxPrompts = 1024;
// Long-prompt seeds sit far from --seed and --seed + 1 (the throughput and batch-1 prompts): a
// prompt drawn from the same seed would share their leading ids and hit the prefix cache.
constexpr uint64_t kTtftSeedOffset = 1000003;

const CommandSpec kBenchSpec = {
    "bench",
    "ARTIFACT [--batch N] [--input-len N] [--output-len N] [--num-prompts N] [--json]",
    "Offline throughput: --num-prompts random prompts of --input-len token ids, each generating\n"
    "exactly --output-len tokens, submitted at once; the engine batches up to --batch. Reports\n"
    "requests/s, output and total tokens/s, TTFT and inter-token latency (mean/p50/p99, measured\n"
    "as each token leaves the engine) and a batch-1 decode tokens/s figure. EOS never ends a\n"
    "request early (ignore_eos is always on). --ttft-len N adds the time to first token of one\n"
    "N-token prompt alone and the prefill tokens/s it implies. Progress on stderr; the --json\n"
    "fields are documented in docs/benchmarks.md.",
    {
        {"--batch", "N", "max concurrent sequences (default: the compiled --max-batch)"},
        {"--input-len", "N", "prompt length in tokens (default 32)"},
        {"--output-len", "N", "generated tokens per prompt (default 64)"},
        {"--num-prompts", "N", "prompts submitted at once (default 4 x batch, at most 1024)"},
        {"--device", "cpu|cuda|cuda:N", "device to run on (default cpu; cuda is cuda:0)"},
        {"--devices", "0,1,...",
         "CUDA GPU of each tensor-parallel rank (default 0..tp-1); a repeated GPU is shared"},
        {"--kv-cache-mb", "N", "KV cache size in MiB (default 256 on cpu)"},
        {"--gpu-memory-utilization", "F",
         "on cuda, the KV cache fills each GPU up to this fraction, in (0, 1] (default 0.9)"},
        {"--seed", "S", "seed of the random prompt ids (default 0)"},
        {"--no-batch1", "", "skip the batch-1 decode measurement"},
        {"--json", "", "print one JSON object instead of a table"},
        {"--ignore-eos", "",
         "accepted for vLLM-style scripts; always on: every prompt generates "
         "exactly --output-len tokens"},
        {"--ttft-len", "N", "also time the first token of one N-token prompt alone (default off)"},
        {"--ttft-repeats", "R", "timed --ttft-len runs after one warm-up (default 5)"},
        {"--no-verify-weights", "", "skip hashing every weight at load (large models)"},
    },
    1,
    1,
};

struct BenchConfig {
  std::string artifact;
  std::string device;
  std::vector<int> devices;        // --devices; empty: GPU r for rank r
  double gpuMemoryUtilization = 0; // 0: the default on cuda
  int32_t batch = 0;
  int32_t inputLen = 0;
  int32_t outputLen = 0;
  int32_t numPrompts = 0; // 0: 4 x batch
  size_t kvCacheBytes = 0;
  uint64_t seed = 0;
  bool batch1 = true;
  bool json = false;
  int32_t ttftLen = 0; // 0: no long-prompt TTFT
  int32_t ttftRepeats = 0;
  bool verifyWeights = true;
};

Result<BenchConfig> configFrom(const Args &args) {
  BenchConfig c;
  c.artifact = args.positionals()[0];
  c.device = args.getOr("--device", args.has("--devices") ? "cuda" : "cpu");
  if (auto devices = args.get("--devices")) {
    KILN_ASSIGN_OR_RETURN(c.devices, parseDeviceList(*devices, "--devices"));
  }
  KILN_ASSIGN_OR_RETURN(c.gpuMemoryUtilization, args.getFraction("--gpu-memory-utilization"));
  KILN_ASSIGN_OR_RETURN(int64_t batch, args.getInt("--batch", 0, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t inputLen, args.getInt("--input-len", 32, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t outputLen, args.getInt("--output-len", 64, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t numPrompts, args.getInt("--num-prompts", 0, 1, kMaxPrompts));
  // 0 when absent: ServingModel picks 256 MiB on cpu, --gpu-memory-utilization on cuda.
  KILN_ASSIGN_OR_RETURN(int64_t kvMiB, args.getInt("--kv-cache-mb", 0, 1, 1 << 30));
  KILN_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0, 0, INT64_MAX));
  c.batch = static_cast<int32_t>(batch);
  c.inputLen = static_cast<int32_t>(inputLen);
  c.outputLen = static_cast<int32_t>(outputLen);
  c.numPrompts = static_cast<int32_t>(numPrompts);
  c.kvCacheBytes = static_cast<size_t>(kvMiB) << 20;
  c.seed = static_cast<uint64_t>(seed);
  c.batch1 = !args.has("--no-batch1");
  c.json = args.has("--json");
  KILN_ASSIGN_OR_RETURN(int64_t ttftLen, args.getInt("--ttft-len", 0, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t ttftRepeats, args.getInt("--ttft-repeats", 5, 1, 1000));
  c.ttftLen = static_cast<int32_t>(ttftLen);
  c.ttftRepeats = static_cast<int32_t>(ttftRepeats);
  c.verifyWeights = !args.has("--no-verify-weights");
  return c;
}

// Token arrival times of one request, taken by its reader thread.
struct Timeline {
  Clock::time_point submitted;
  std::vector<Clock::time_point> tokens;
  Status error;
};

struct RunStats {
  double seconds = 0;
  std::vector<double> ttft; // seconds, one per request
  std::vector<double> itl;  // seconds, every gap between consecutive tokens of a request
  rt::MetricsSnapshot before, after;
};

rt::Request benchRequest(std::vector<int32_t> promptIds, int32_t outputLen) {
  rt::Request request;
  request.promptIds = std::move(promptIds);
  request.sampling.temperature = 0;
  request.sampling.maxTokens = outputLen;
  request.sampling.ignoreEos = true;
  return request;
}

std::vector<std::vector<int32_t>> randomPrompts(int32_t count, int32_t len, int32_t vocab,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<std::vector<int32_t>> prompts(count, std::vector<int32_t>(len));
  for (auto &prompt : prompts)
    for (int32_t &token : prompt)
      token = id(rng);
  return prompts;
}

void readStream(rt::RequestHandle handle, Timeline &timeline, std::atomic<int> &done) {
  while (std::optional<rt::RequestOutput> out = handle.stream->next()) {
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < out->tokenIds.size(); ++i)
      timeline.tokens.push_back(now);
    if (out->finishReason == rt::FinishReason::kError)
      timeline.error = out->error;
  }
  done.fetch_add(1);
}

// Waits for the readers, printing progress to stderr about every two seconds.
void waitWithProgress(std::vector<std::thread> &readers, std::atomic<int> &done,
                      Clock::time_point start, bool quiet) {
  const int total = static_cast<int>(readers.size());
  Clock::time_point nextReport = start + std::chrono::seconds(2);
  while (done.load() < total) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!quiet && Clock::now() >= nextReport) {
      nextReport += std::chrono::seconds(2);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      std::fprintf(stderr, "kiln bench: %d/%d requests done after %.1f s\n", done.load(), total,
                   elapsed);
    }
  }
  for (std::thread &reader : readers)
    reader.join();
}

Status collectTimes(const std::vector<Timeline> &timelines, RunStats &stats) {
  for (const Timeline &t : timelines) {
    if (!t.error.isOk())
      return t.error.withContext("a benchmark request failed");
    if (t.tokens.empty())
      return internalError("a benchmark request produced no tokens");
    stats.ttft.push_back(std::chrono::duration<double>(t.tokens.front() - t.submitted).count());
    for (size_t i = 1; i < t.tokens.size(); ++i)
      stats.itl.push_back(std::chrono::duration<double>(t.tokens[i] - t.tokens[i - 1]).count());
  }
  return okStatus();
}

// Submits every request at once and waits until all have finished.
Result<RunStats> runRequests(rt::Engine &engine, std::vector<rt::Request> requests, bool quiet) {
  RunStats stats;
  std::vector<Timeline> timelines(requests.size());
  std::vector<std::thread> readers;
  std::atomic<int> done{0};
  stats.before = engine.metrics();
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    timelines[i].submitted = Clock::now();
    Result<rt::RequestHandle> handle = engine.submit(std::move(requests[i]));
    if (!handle.isOk()) {
      for (std::thread &reader : readers) // the engine finishes what it accepted
        reader.join();
      return handle.status().withContext("submitting benchmark request " + std::to_string(i));
    }
    readers.emplace_back(readStream, *handle, std::ref(timelines[i]), std::ref(done));
  }
  waitWithProgress(readers, done, start, quiet);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.after = engine.metrics();
  KILN_RETURN_IF_ERROR(collectTimes(timelines, stats));
  return stats;
}

// Nearest-rank percentile of `values` (sorted in place), in milliseconds.
double percentileMs(std::vector<double> &values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1] * 1e3;
}

nlohmann::ordered_json latencyJson(std::vector<double> values) {
  double sum = 0;
  for (double v : values)
    sum += v;
  const double mean = values.empty() ? 0 : sum / values.size() * 1e3;
  const double p50 = percentileMs(values, 50);
  const double p99 = percentileMs(values, 99);
  return {{"mean", mean}, {"p50", p50}, {"p99", p99}};
}

Result<nlohmann::ordered_json> measureThroughput(rt::ServingModel &model, const BenchConfig &c,
                                                 int32_t numPrompts) {
  rt::Engine &engine = model.engine();
  const int32_t vocab = engine.limits().vocabSize;
  std::vector<rt::Request> requests;
  for (auto &prompt : randomPrompts(numPrompts, c.inputLen, vocab, c.seed))
    requests.push_back(benchRequest(std::move(prompt), c.outputLen));
  KILN_ASSIGN_OR_RETURN(RunStats stats, runRequests(engine, std::move(requests), false));
  const uint64_t generated = stats.after.generationTokens - stats.before.generationTokens;
  const uint64_t prompted = stats.after.promptTokens - stats.before.promptTokens;
  const uint64_t steps = stats.after.steps - stats.before.steps;
  const uint64_t computed = stats.after.computedTokens - stats.before.computedTokens;
  nlohmann::ordered_json out;
  out["elapsed_s"] = stats.seconds;
  out["requests_per_s"] = numPrompts / stats.seconds;
  out["output_tokens_per_s"] = generated / stats.seconds;
  out["total_tokens_per_s"] = (prompted + generated) / stats.seconds;
  out["ttft_ms"] = latencyJson(stats.ttft);
  out["itl_ms"] = latencyJson(stats.itl);
  out["engine"] = {
      {"steps", steps},
      {"computed_tokens", computed},
      {"generated_tokens", generated},
      {"cached_prompt_tokens", stats.after.cachedTokens - stats.before.cachedTokens},
      {"preemptions", stats.after.preemptions - stats.before.preemptions},
      {"mean_tokens_per_step", steps ? static_cast<double>(computed) / steps : 0.0},
  };
  return out;
}

// One request alone: tokens after the first divided by the time between the first and last.
Result<double> measureBatch1Decode(rt::ServingModel &model, const BenchConfig &c) {
  rt::Engine &engine = model.engine();
  auto prompt = randomPrompts(1, c.inputLen, engine.limits().vocabSize, c.seed + 1).front();
  std::vector<rt::Request> one;
  one.push_back(benchRequest(std::move(prompt), c.outputLen));
  KILN_ASSIGN_OR_RETURN(RunStats stats, runRequests(engine, std::move(one), true));
  double decodeSeconds = 0;
  for (double gap : stats.itl)
    decodeSeconds += gap;
  return decodeSeconds > 0 ? stats.itl.size() / decodeSeconds : 0.0;
}

// One prompt of --ttft-len ids alone, generating one token, after one untimed run: the prefill
// of the whole prompt (chunked by the compiled max tokens per step) plus one sampling step.
Result<nlohmann::ordered_json> measureLongPromptTtft(rt::ServingModel &model,
                                                     const BenchConfig &c) {
  rt::Engine &engine = model.engine();
  const int32_t vocab = engine.limits().vocabSize;
  std::vector<double> ttft;
  for (int32_t run = 0; run <= c.ttftRepeats; ++run) {
    auto prompt = randomPrompts(1, c.ttftLen, vocab, c.seed + kTtftSeedOffset + run).front();
    std::vector<rt::Request> one;
    one.push_back(benchRequest(std::move(prompt), 1));
    KILN_ASSIGN_OR_RETURN(RunStats stats, runRequests(engine, std::move(one), true));
    if (run > 0)
      ttft.push_back(stats.ttft.front());
  }
  const nlohmann::ordered_json latency = latencyJson(ttft);
  const auto [least, most] = std::minmax_element(ttft.begin(), ttft.end());
  return nlohmann::ordered_json{{"input_len", c.ttftLen},  {"repeats", c.ttftRepeats},
                                {"mean", latency["mean"]}, {"p50", latency["p50"]},
                                {"min", *least * 1e3},     {"max", *most * 1e3}};
}

// What the artifact holds: shapes for FLOP and byte counts (tools/bench/compare.py), the storage
// dtype of the weights (the dtype holding most weight bytes) and the weight bytes of all ranks.
nlohmann::ordered_json modelJson(const rt::Artifact &artifact) {
  const schema::Plan &plan = artifact.plan();
  const schema::ModelInfo &m = *plan.model();
  uint64_t weightBytes = 0;
  std::map<schema::DType, uint64_t> bytesByDtype;
  for (int r = 0; r < artifact.numRanks(); ++r)
    for (const schema::WeightEntry *w : *artifact.rank(r).weights()) {
      weightBytes += w->size();
      bytesByDtype[w->dtype()] += w->size();
    }
  auto largest = std::max_element(bytesByDtype.begin(), bytesByDtype.end(),
                                  [](const auto &a, const auto &b) { return a.second < b.second; });
  return {{"vocab_size", m.vocab_size()},
          {"hidden_size", m.hidden_size()},
          {"intermediate_size", m.intermediate_size()},
          {"num_layers", m.num_layers()},
          {"num_heads", m.num_heads()},
          {"num_kv_heads", m.num_kv_heads()},
          {"head_dim", m.head_dim()},
          {"tie_word_embeddings", m.tie_word_embeddings()},
          {"tp", plan.tp()},
          {"weights_dtype", largest == bytesByDtype.end() ? "" : rt::dtypeName(largest->first)},
          {"weight_bytes", weightBytes},
          {"activation_dtype", rt::dtypeName(plan.activation_dtype())},
          {"kv_dtype", rt::dtypeName(plan.kv_cache()->dtype())}};
}

Status checkLengths(const BenchConfig &c, const rt::EngineLimits &limits) {
  if (static_cast<int64_t>(c.inputLen) + c.outputLen > limits.maxSeqLen)
    return outOfRange("--input-len " + std::to_string(c.inputLen) + " + --output-len " +
                      std::to_string(c.outputLen) + " exceeds the max sequence length " +
                      std::to_string(limits.maxSeqLen) +
                      " (recompile with a larger --max-seq-len, or a larger --kv-cache-mb)");
  if (static_cast<int64_t>(c.ttftLen) + 1 > limits.maxSeqLen)
    return outOfRange("--ttft-len " + std::to_string(c.ttftLen) +
                      " + 1 generated token exceeds the max sequence length " +
                      std::to_string(limits.maxSeqLen) +
                      " (recompile with a larger --max-seq-len, or a larger --kv-cache-mb)");
  return okStatus();
}

void printTable(const nlohmann::ordered_json &r) {
  auto latency = [](const nlohmann::ordered_json &l) {
    char line[128];
    std::snprintf(line, sizeof line, "mean %.2f  p50 %.2f  p99 %.2f", l["mean"].get<double>(),
                  l["p50"].get<double>(), l["p99"].get<double>());
    return std::string(line);
  };
  std::printf("artifact              %s (%s)\n", r["artifact"].get<std::string>().c_str(),
              r["device"].get<std::string>().c_str());
  if (r.contains("cpu_isa"))
    std::printf("cpu kernels           %s\n", r["cpu_isa"].get<std::string>().c_str());
  std::printf("prompts               %d x (%d in + %d out), batch %d\n",
              r["num_prompts"].get<int>(), r["input_len"].get<int>(), r["output_len"].get<int>(),
              r["batch"].get<int>());
  std::printf("elapsed s             %.3f\n", r["elapsed_s"].get<double>());
  std::printf("requests/s            %.3f\n", r["requests_per_s"].get<double>());
  std::printf("output tokens/s       %.1f\n", r["output_tokens_per_s"].get<double>());
  std::printf("total tokens/s        %.1f\n", r["total_tokens_per_s"].get<double>());
  std::printf("TTFT ms               %s\n", latency(r["ttft_ms"]).c_str());
  std::printf("inter-token ms        %s\n", latency(r["itl_ms"]).c_str());
  if (r.contains("batch1_decode_tokens_per_s"))
    std::printf("batch-1 decode tok/s  %.1f\n", r["batch1_decode_tokens_per_s"].get<double>());
  if (r.contains("long_prompt_ttft_ms")) {
    const auto &t = r["long_prompt_ttft_ms"];
    std::printf("long-prompt TTFT ms   %d tokens: mean %.2f  p50 %.2f  min %.2f (%.0f prefill "
                "tok/s)\n",
                t["input_len"].get<int>(), t["mean"].get<double>(), t["p50"].get<double>(),
                t["min"].get<double>(), r["prefill_tokens_per_s"].get<double>());
  }
  const auto &e = r["engine"];
  std::printf("engine                %llu steps, %.1f tokens/step, %llu preemptions\n",
              static_cast<unsigned long long>(e["steps"].get<uint64_t>()),
              e["mean_tokens_per_step"].get<double>(),
              static_cast<unsigned long long>(e["preemptions"].get<uint64_t>()));
}

Result<nlohmann::ordered_json> runBench(const BenchConfig &c) {
  rt::ServingOptions options;
  options.device = c.device;
  options.devices = c.devices;
  options.gpuMemoryUtilization = c.gpuMemoryUtilization;
  options.kvCacheBytes = c.kvCacheBytes;
  options.log = [](const std::string &line) { std::cerr << "kiln bench: " << line << "\n"; };
  options.maxBatch = c.batch;
  options.verifyWeights = c.verifyWeights;
  Result<std::unique_ptr<rt::ServingModel>> opened = rt::ServingModel::open(c.artifact, options);
  if (!opened.isOk() && c.batch > 0)
    return opened.status().withContext("--batch " + std::to_string(c.batch));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::ServingModel> model, std::move(opened));
  const rt::EngineLimits &limits = model->engine().limits();
  KILN_RETURN_IF_ERROR(checkLengths(c, limits));
  const int32_t numPrompts = c.numPrompts ? c.numPrompts
                                          : std::min<int32_t>(4 * limits.maxBatch, kMaxPrompts);
  // Warm-up: first-touch of weights and KV pages, thread pools; not counted.
  std::vector<rt::Request> warmup;
  warmup.push_back(benchRequest(std::vector<int32_t>(c.inputLen, 0), std::min(c.outputLen, 4)));
  KILN_RETURN_IF_ERROR(runRequests(model->engine(), std::move(warmup), true).status());
  nlohmann::ordered_json r = {{"artifact", c.artifact},  {"device", c.device},
                              {"batch", limits.maxBatch}, {"input_len", c.inputLen},
                              {"output_len", c.outputLen}, {"num_prompts", numPrompts}};
  r["ignore_eos"] = true; // benchRequest: every prompt generates exactly --output-len tokens
  if (c.device == "cpu") {
    r["cpu_isa"] = rt::cpuKernelIsa(); // the kernels' instruction-set level (KILN_CPU_ISA)
    r["cpu_activations"] = rt::cpuKernelActivations(); // KILN_CPU_ACTIVATIONS
  }
  nlohmann::ordered_json modelInfo = modelJson(model->artifact());
  r["weights_dtype"] = modelInfo["weights_dtype"];
  r["model"] = std::move(modelInfo);
  KILN_ASSIGN_OR_RETURN(nlohmann::ordered_json throughput, measureThroughput(*model, c, numPrompts));
  r.update(throughput);
  if (c.batch1 && c.outputLen > 1) {
    KILN_ASSIGN_OR_RETURN(double decode, measureBatch1Decode(*model, c));
    r["batch1_decode_tokens_per_s"] = decode;
  }
  if (c.ttftLen > 0) {
    KILN_ASSIGN_OR_RETURN(nlohmann::ordered_json ttft, measureLongPromptTtft(*model, c));
    r["prefill_tokens_per_s"] = c.ttftLen / (ttft["mean"].get<double>() * 1e-3);
    r["long_prompt_ttft_ms"] = std::move(ttft);
  }
  return r;
}

} // namespace

int runBench(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kBenchSpec, argv);
  if (!args.isOk())
    return reportError("bench", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kBenchSpec);
    return 0;
  }
  Result<BenchConfig> config = configFrom(*args);
  if (!config.isOk())
    return reportError("bench", config.status());
  Result<nlohmann::ordered_json> result = runBench(*config);
  if (!result.isOk())
    return reportError("bench", result.status());
  if (config->json)
    std::cout << result->dump() << "\n";
  else
    printTable(*result);
  return 0;
}

} // namespace kiln::tools
