// Continuous batching as a per-step token budget (the vLLM v1 idea): each step gives every
// scheduled sequence a number of new tokens; a decode is 1, a prefill chunk is up to the remaining
// budget, and a prefix-cache hit simply starts a sequence further along. The scheduler owns the
// sequences' token lists and computed lengths; the engine owns sampling and request state.
//
// Policy: running sequences first (decodes, then prefill chunks, each group oldest first), then
// waiting ones strictly first-come-first-served (the head is never skipped, so nothing starves).
// When blocks run out the latest-arrived running sequence is preempted by recompute: its blocks are
// freed and it goes back to the waiting queue in arrival order (ahead of everything that arrived
// later), keeping its generated tokens, which are re-prefilled with the prompt. No sequence is
// admitted in a step that preempted.
#pragma once

#include "runtime/base/status.h"
#include "runtime/exec/step.h"
#include "runtime/kv/kv_cache_manager.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

struct SchedulerConfig {
  int32_t maxBatch = 0;         // sequences per step
  int32_t maxTokensPerStep = 0; // token budget per step; must be >= maxBatch
  int32_t maxSeqLen = 0;        // prompt + generated tokens; also bounded by the KV pool
  bool enableChunkedPrefill = true;
  // RunnerLimits::ropeSwitchLength: a sequence longer than this neither takes nor gives
  // prefix-cache blocks (its keys rotate by its length). 0: no such limit.
  int32_t ropeSwitchLength = 0;
  // RunnerLimits::recomputeAtRopeSwitch: a running sequence whose keys were written for a length
  // at most ropeSwitchLength restarts from position 0 (its blocks freed, its tokens prefilled
  // again) when it grows past it.
  bool recomputeAtRopeSwitch = false;
};

struct Sequence {
  SeqId id = 0;
  uint64_t arrival = 0;          // FCFS order; forked samples share their parent's
  std::vector<int32_t> tokenIds; // prompt then generated tokens
  int32_t promptLen = 0;
  int32_t numComputed = 0;           // tokens whose KV is written
  int32_t numCachedPromptTokens = 0; // prefix-cache hit at first admission
  int32_t numPreemptions = 0;
  bool admittedOnce = false;
  bool running = false;
  // Its KV was computed for a length past SchedulerConfig::ropeSwitchLength (set when it starts
  // computing from position 0).
  bool pastRopeSwitch = false;

  int32_t numTokens() const { return static_cast<int32_t>(tokenIds.size()); }
  int32_t numRemaining() const { return numTokens() - numComputed; }
};

// One sequence's share of a step.
struct ScheduledChunk {
  SeqId id = 0;
  int32_t startPosition = 0; // == the sequence's numComputed when scheduled
  int32_t numTokens = 0;
  bool wantsLogits = false; // the chunk reaches the end of the sequence's tokens
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<SeqId> preempted;
  // Sequences the scheduler could not serve for a reason other than a full pool (a bug or a
  // limit); they are removed from the scheduler and their blocks freed.
  std::vector<std::pair<SeqId, Status>> failed;
  int32_t numTokens = 0;
  int32_t numCachedTokens = 0; // prefix-cache hits of sequences admitted this step
};

class Scheduler {
public:
  static Result<Scheduler> create(const SchedulerConfig &config, KvCacheManager *kv);

  const SchedulerConfig &config() const { return config_; }

  // A new sequence enters the waiting queue.
  Status addSequence(SeqId id, std::vector<int32_t> tokenIds, uint64_t arrival);
  // A parallel sample of `parent` whose prompt is computed: it shares the parent's full prompt
  // blocks and starts with `firstToken` (sampled from the parent's logits). It runs at once when
  // the batch has room, otherwise waits without blocks and is re-prefilled when admitted.
  Status forkSequence(SeqId parent, SeqId child, int32_t firstToken);

  SchedulerOutput schedule();
  // After the runner computed `out`: advances computed lengths and publishes full blocks to the
  // prefix cache.
  Status onStepComputed(const SchedulerOutput &out);
  Status appendToken(SeqId id, int32_t tokenId);
  // Removes a finished or aborted sequence, running or waiting, and frees its blocks.
  Status finishSequence(SeqId id);

  // The runner's view of a schedule: tokens, positions and block tables, in chunk order.
  StepBatch makeStepBatch(const SchedulerOutput &out) const;

  const Sequence *find(SeqId id) const;
  int32_t numRunning() const { return static_cast<int32_t>(running_.size()); }
  int32_t numWaiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool hasWork() const { return !running_.empty() || !waiting_.empty(); }
  const std::vector<SeqId> &runningQueue() const { return running_; }
  const std::deque<SeqId> &waitingQueue() const { return waiting_; }
  uint64_t numSteps() const { return numSteps_; }

private:
  Scheduler(const SchedulerConfig &config, KvCacheManager *kv) : config_(config), kv_(kv) {}

  void scheduleRunning(SchedulerOutput &out, int32_t &budget);
  // Returns false when `seq` itself had to be preempted.
  bool allocateOrPreempt(Sequence &seq, int32_t numNew, SchedulerOutput &out, int32_t &budget);
  void preemptLatest(SchedulerOutput &out, int32_t &budget);
  void admitWaiting(SchedulerOutput &out, int32_t &budget);
  void failSequence(SeqId id, Status status, SchedulerOutput &out, int32_t &budget);
  void unschedule(SeqId id, SchedulerOutput &out, int32_t &budget);
  void insertRunning(SeqId id);
  void insertWaiting(SeqId id);
  bool comesBefore(SeqId a, SeqId b) const;
  // Whether `seq` may take or give prefix-cache blocks (SchedulerConfig::ropeSwitchLength).
  bool sharesKv(const Sequence &seq) const;
  // SchedulerConfig::recomputeAtRopeSwitch: restarts `seq` when it has grown past the switch
  // with keys written before it; records which side of the switch a fresh start is on.
  void followRopeSwitch(Sequence &seq);

  SchedulerConfig config_;
  KvCacheManager *kv_;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::vector<SeqId> running_; // sorted by (arrival, id)
  std::deque<SeqId> waiting_;  // sorted by (arrival, id)
  uint64_t numSteps_ = 0;
};

} // namespace kiln::rt
