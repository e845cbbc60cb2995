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
#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/grammar_matcher.h"

#include <chrono>
#include <functional>
#include <map>
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
  // The vocabulary's token bytes (Tokenizer::tokenBytes) for structured outputs; without it a
  // request with a grammar is refused.
  std::shared_ptr<const structured::TokenTrie> vocabulary;
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
  // The monotonic clock the engine thread reads for its metrics' times; tests inject a fake.
  // Unset: std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

// Limits the engine actually runs with, after defaults and the KV pool's capacity.
struct EngineLimits {
  int32_t maxBatch = 0;
  int32_t maxTokensPerStep = 0;
  int32_t maxSeqLen = 0; // min(max_seq_len, maxBlocksPerSeq, the longest sequence the pool holds)
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
  // Adds a request; a request failing validation ends at once with an error output. `arrival`
  // (when the client submitted it; TTFT counts from it) defaults to now on the engine's clock.
  void addRequest(RequestId id, Request request,
                  std::optional<Clock::time_point> arrival = std::nullopt);
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
  // Whether the sequence belongs to an embedding request (Request::embed).
  bool embeds(SeqId seq) const;
  // An embedding request's last final hidden state: its only output, and its end.
  void processHidden(SeqId seq, std::span<const float> row);
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
  // The mask cache of `grammar` (one per grammar, kept while requests use it, and for the last
  // few grammars after).
  std::shared_ptr<structured::GrammarAutomaton>
  automatonFor(const std::shared_ptr<const structured::Grammar> &grammar);
  Clock::time_point now() const { return config_.clock ? config_.clock() : Clock::now(); }
  // Notes the first-scheduled time of each request `plan` admitted from the waiting queue (its
  // sequence not in `wasRunning`, sorted) and returns their prefix-cache queries in tokens.
  uint64_t recordAdmissions(const SchedulerOutput &plan, const std::vector<SeqId> &wasRunning,
                            Clock::time_point scheduledAt);
  // A request ended: its queue, prefill and decode times, if it produced a first token.
  void observeRequestTimes(const RequestState &req);

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
  // Per grammar in use (the grammar pinned, so its address is not reused): its mask cache.
  std::map<const structured::Grammar *, std::pair<std::shared_ptr<const structured::Grammar>,
                                                  std::shared_ptr<structured::GrammarAutomaton>>>
      automata_;
  std::vector<RequestOutput> outputs_;
  SchedulerOutput lastSchedule_;
  Clock::time_point stepTokenTime_; // when this step's model output came back
  EngineMetrics metrics_;
};

} // namespace kiln::rt
