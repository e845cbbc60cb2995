// The engine's single-threaded core: schedule -> execute -> sample -> emit, one step per call.
// Engine runs it on its thread; tests drive it directly for deterministic, step-exact checks.
#pragma once

#include "runtime/base/status.h"
#include "runtime/engine/metrics.h"
#include "runtime/engine/request.h"
#include "runtime/engine/text_hooks.h"
#include "runtime/exec/step.h"
#include "runtime/kv/kv_cache_manager.h"
#include "runtime/sampling/rng.h"
#include "runtime/sched/scheduler.h"

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

struct EngineConfig {
  ModelRunner *runner = nullptr;      // not owned; outlives the engine
  std::vector<int32_t> eosTokenIds;   // generation_config.json's eos ids
  Detokenizer *detokenizer = nullptr; // optional, not owned; without it text stays empty
  StopStringFilterFactory *stopStrings = nullptr; // optional, not owned
  // 0 takes the runner's limit; a value above the runner's is an error naming the field.
  int32_t maxBatch = 0;
  int32_t maxTokensPerStep = 0;
  int32_t maxSeqLen = 0;
  int32_t numKvBlocks = 0;
  bool enablePrefixCaching = true;
  bool enableChunkedPrefill = true;
  int32_t maxLogprobs = 20;
  int32_t maxSamplesPerRequest = 0; // limit on n; 0: maxBatch
  std::optional<uint64_t> seed;     // for unseeded requests; unset: random per engine
};

// Limits the engine actually runs with, after defaults and the KV pool's capacity.
struct EngineLimits {
  int32_t maxBatch = 0;
  int32_t maxTokensPerStep = 0;
  int32_t maxSeqLen = 0; // min(max_seq_len, maxBlocksPerSeq and pool capacity in tokens)
  int32_t numKvBlocks = 0;
  int32_t blockSize = 0;
  int32_t vocabSize = 0;
  int32_t maxSamplesPerRequest = 0;
};

class EngineCore {
public:
  using Clock = std::chrono::steady_clock;

  static Result<std::unique_ptr<EngineCore>> create(const EngineConfig &config);
  ~EngineCore();
  EngineCore(const EngineCore &) = delete;
  EngineCore &operator=(const EngineCore &) = delete;

  // Thread-safe (reads only immutable configuration): Engine::submit calls it on caller threads.
  Status validate(const Request &request) const;
  // Adds a request; a request failing validation ends at once with an error output.
  void addRequest(RequestId id, Request request, Clock::time_point arrival = Clock::now());
  // Ends the request with finish reason abort and frees its blocks; unknown ids are ignored.
  void abortRequest(RequestId id);
  // One engine iteration. A failed execute fails the requests in that step; others go on.
  void step();
  // Outputs produced since the last call, in emission order.
  std::vector<RequestOutput> takeOutputs();

  bool hasWork() const { return !requests_.empty(); }
  bool hasRequest(RequestId id) const { return requests_.count(id) != 0; }
  const EngineLimits &limits() const { return limits_; }
  const EngineMetrics &metrics() const { return metrics_; }
  const Scheduler &scheduler() const { return *scheduler_; }
  const KvCacheManager &kvCache() const { return kv_; }
  // The schedule of the last step (for tests checking budgets and batch sizes).
  const SchedulerOutput &lastSchedule() const { return lastSchedule_; }

private:
  struct SampleState;
  struct RequestState;

  EngineCore(const EngineConfig &config, const EngineLimits &limits, KvCacheManager kv);

  void emit(RequestOutput output);
  void retireFinished();
  void endRequest(RequestId id, FinishReason reason, const Status &status);
  void failOwnerOf(SeqId seq, const Status &status);
  Status openTextHooks(RequestState &req, int32_t index);
  Status checkStepOutput(const StepOutput &out, const SchedulerOutput &plan) const;
  void handleStall();
  void processLogits(SeqId seq, std::span<const float> row);
  // Greedy steps whose runner gave only each row's argmax (LogitsWanted::kArgmax).
  bool samplesByArgmax(SeqId seq) const;
  void processArgmax(SeqId seq, int32_t tokenId);
  void forkSamples(RequestState &req, std::span<const float> row);
  Result<SampledToken> sampleFor(RequestState &req, int32_t index, std::span<const float> row,
                                 std::span<const int32_t> tokenIds);
  void onTokenSampled(RequestState &req, int32_t index, const SampledToken &sampled);
  FinishReason appendText(RequestState &req, int32_t index, int32_t token, RequestOutput &out);
  void finishSample(RequestState &req, int32_t index, FinishReason reason, bool stoppedByString,
                    RequestOutput &out);
  std::string flushText(RequestState &req, int32_t index);
  void updateGauges();

  EngineConfig config_;
  EngineLimits limits_;
  KvCacheManager kv_;
  std::optional<Scheduler> scheduler_;
  uint64_t defaultSeed_ = 0;
  SeqId nextSeqId_ = 1;
  uint64_t nextArrival_ = 0;
  std::vector<RequestId> retired_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::unordered_map<SeqId, std::pair<RequestId, int32_t>> seqOwner_;
  std::vector<RequestOutput> outputs_;
  SchedulerOutput lastSchedule_;
  EngineMetrics metrics_;
};

} // namespace kiln::rt
