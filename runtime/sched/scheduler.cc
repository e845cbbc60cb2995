#include "runtime/sched/scheduler.h"

#include <algorithm>
#include <string>

namespace kiln::rt {

Result<Scheduler> Scheduler::create(const SchedulerConfig &config, KvCacheManager *kv) {
  if (!kv)
    return invalidArgument("Scheduler needs a KvCacheManager");
  if (config.maxBatch <= 0)
    return invalidArgument("SchedulerConfig.maxBatch must be > 0, got " +
                           std::to_string(config.maxBatch));
  if (config.maxTokensPerStep < config.maxBatch)
    return invalidArgument("SchedulerConfig.maxTokensPerStep (" +
                           std::to_string(config.maxTokensPerStep) + ") must be >= maxBatch (" +
                           std::to_string(config.maxBatch) +
                           ") so every running sequence can decode each step");
  if (config.maxSeqLen <= 0)
    return invalidArgument("SchedulerConfig.maxSeqLen must be > 0, got " +
                           std::to_string(config.maxSeqLen));
  if (!config.enableChunkedPrefill && config.maxTokensPerStep < config.maxSeqLen)
    return invalidArgument("without chunked prefill, maxTokensPerStep (" +
                           std::to_string(config.maxTokensPerStep) + ") must be >= maxSeqLen (" +
                           std::to_string(config.maxSeqLen) + ") to prefill any sequence");
  return Scheduler(config, kv);
}

bool Scheduler::comesBefore(SeqId a, SeqId b) const {
  const Sequence &x = seqs_.at(a), &y = seqs_.at(b);
  return x.arrival != y.arrival ? x.arrival < y.arrival : x.id < y.id;
}

void Scheduler::insertRunning(SeqId id) {
  auto pos = std::upper_bound(running_.begin(), running_.end(), id,
                              [&](SeqId a, SeqId b) { return comesBefore(a, b); });
  running_.insert(pos, id);
}

void Scheduler::insertWaiting(SeqId id) {
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), id,
                              [&](SeqId a, SeqId b) { return comesBefore(a, b); });
  waiting_.insert(pos, id);
}

Status Scheduler::addSequence(SeqId id, std::vector<int32_t> tokenIds, uint64_t arrival) {
  if (seqs_.count(id))
    return invalidArgument("sequence id " + std::to_string(id) + " is already scheduled");
  if (tokenIds.empty())
    return invalidArgument("sequence " + std::to_string(id) + " has no prompt tokens");
  if (static_cast<int64_t>(tokenIds.size()) > config_.maxSeqLen)
    return outOfRange("prompt has " + std::to_string(tokenIds.size()) + " tokens; max_seq_len is " +
                      std::to_string(config_.maxSeqLen));
  Sequence seq;
  seq.id = id;
  seq.arrival = arrival;
  seq.promptLen = static_cast<int32_t>(tokenIds.size());
  seq.tokenIds = std::move(tokenIds);
  seqs_.emplace(id, std::move(seq));
  insertWaiting(id);
  return okStatus();
}

Status Scheduler::forkSequence(SeqId parent, SeqId child, int32_t firstToken) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end())
    return failedPrecondition("fork from unknown sequence " + std::to_string(parent));
  if (seqs_.count(child))
    return invalidArgument("fork into existing sequence id " + std::to_string(child));
  const Sequence &from = it->second;
  if (!from.running || from.numComputed < from.promptLen)
    return failedPrecondition("fork from sequence " + std::to_string(parent) +
                              " before its prompt is computed");
  Sequence seq;
  seq.id = child;
  seq.arrival = from.arrival;
  seq.promptLen = from.promptLen;
  seq.tokenIds.assign(from.tokenIds.begin(), from.tokenIds.begin() + from.promptLen);
  seq.tokenIds.push_back(firstToken);
  seq.numCachedPromptTokens = from.numCachedPromptTokens;
  seq.admittedOnce = true;
  seqs_.emplace(child, std::move(seq));
  Sequence &added = seqs_.at(child);
  if (numRunning() < config_.maxBatch) {
    Result<int32_t> shared = kv_->forkFullBlocks(parent, child, from.promptLen);
    if (!shared.isOk()) {
      seqs_.erase(child);
      return shared.status();
    }
    added.numComputed = *shared;
    added.running = true;
    insertRunning(child);
  } else {
    insertWaiting(child);
  }
  return okStatus();
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.maxTokensPerStep;
  scheduleRunning(out, budget);
  if (out.preempted.empty())
    admitWaiting(out, budget);
  ++numSteps_;
  return out;
}

void Scheduler::scheduleRunning(SchedulerOutput &out, int32_t &budget) {
  // Decodes first so a long prefill chunk never delays them; preemption edits running_, so walk
  // a copy.
  std::vector<SeqId> order;
  order.reserve(running_.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (SeqId id : running_) {
      const bool isDecode = seqs_.at(id).numRemaining() == 1;
      if (isDecode == (pass == 0))
        order.push_back(id);
    }
  }
  for (SeqId id : order) {
    if (budget <= 0)
      break;
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.running)
      continue; // preempted or failed earlier in this step
    Sequence &seq = it->second;
    followRopeSwitch(seq);
    const int32_t numNew = std::min(seq.numRemaining(), budget);
    if (numNew <= 0)
      continue;
    if (!allocateOrPreempt(seq, numNew, out, budget))
      continue;
    const int32_t start = seq.numComputed;
    out.chunks.push_back({id, start, numNew, start + numNew == seq.numTokens()});
    out.numTokens += numNew;
    budget -= numNew;
  }
}

bool Scheduler::allocateOrPreempt(Sequence &seq, int32_t numNew, SchedulerOutput &out,
                                  int32_t &budget) {
  const SeqId id = seq.id;
  // Blocks before a sliding window go back to the pool first: this step may reuse them.
  if (Status dropped = kv_->dropBlocksBeforeWindow(id, seq.numComputed); !dropped.isOk()) {
    failSequence(id, dropped, out, budget);
    return false;
  }
  for (;;) {
    Result<bool> allocated = kv_->allocateSlots(id, seq.numComputed + numNew);
    if (!allocated.isOk()) {
      failSequence(id, allocated.status(), out, budget);
      return false;
    }
    if (*allocated)
      return true;
    const SeqId victim = running_.back();
    preemptLatest(out, budget);
    if (victim == id)
      return false;
  }
}

void Scheduler::preemptLatest(SchedulerOutput &out, int32_t &budget) {
  const SeqId victim = running_.back();
  running_.pop_back();
  unschedule(victim, out, budget);
  // Freeing a known sequence cannot fail unless the pool is corrupt; the ref-count error is
  // surfaced by the pool's own checks and tests.
  (void)kv_->freeSequence(victim);
  Sequence &seq = seqs_.at(victim);
  seq.numComputed = 0;
  seq.running = false;
  ++seq.numPreemptions;
  insertWaiting(victim);
  out.preempted.push_back(victim);
}

void Scheduler::unschedule(SeqId id, SchedulerOutput &out, int32_t &budget) {
  auto chunk = std::find_if(out.chunks.begin(), out.chunks.end(),
                            [&](const ScheduledChunk &c) { return c.id == id; });
  if (chunk == out.chunks.end())
    return;
  budget += chunk->numTokens;
  out.numTokens -= chunk->numTokens;
  out.chunks.erase(chunk);
}

void Scheduler::admitWaiting(SchedulerOutput &out, int32_t &budget) {
  while (!waiting_.empty() && numRunning() < config_.maxBatch && budget > 0) {
    const SeqId id = waiting_.front();
    Sequence &seq = seqs_.at(id);
    const PrefixHit hit = sharesKv(seq) ? kv_->findCachedPrefix(seq.tokenIds) : PrefixHit{};
    const int32_t remaining = seq.numTokens() - hit.numTokens;
    const int32_t numNew = std::min(remaining, budget);
    if (!config_.enableChunkedPrefill && numNew < remaining)
      break;
    Result<bool> allocated = kv_->allocateSlots(id, hit.numTokens + numNew, &hit);
    if (!allocated.isOk()) {
      failSequence(id, allocated.status(), out, budget);
      continue;
    }
    if (!*allocated)
      break; // strict FCFS: later arrivals never overtake the head
    waiting_.pop_front();
    seq.numComputed = hit.numTokens;
    followRopeSwitch(seq);
    if (!seq.admittedOnce) {
      seq.numCachedPromptTokens = std::min(hit.numTokens, seq.promptLen);
      seq.admittedOnce = true;
    }
    seq.running = true;
    insertRunning(id);
    out.chunks.push_back({id, hit.numTokens, numNew, hit.numTokens + numNew == seq.numTokens()});
    out.numTokens += numNew;
    out.numCachedTokens += hit.numTokens;
    budget -= numNew;
  }
}

void Scheduler::failSequence(SeqId id, Status status, SchedulerOutput &out, int32_t &budget) {
  unschedule(id, out, budget);
  (void)finishSequence(id);
  out.failed.emplace_back(id, std::move(status));
}

Status Scheduler::onStepComputed(const SchedulerOutput &out) {
  Status status;
  for (const ScheduledChunk &chunk : out.chunks) {
    auto it = seqs_.find(chunk.id);
    if (it == seqs_.end())
      continue; // finished (aborted) between schedule and now
    Sequence &seq = it->second;
    if (!seq.running || seq.numComputed != chunk.startPosition) {
      status = internalError("sequence " + std::to_string(chunk.id) +
                             " changed between schedule and step completion");
      continue;
    }
    seq.numComputed += chunk.numTokens;
    if (!sharesKv(seq))
      continue; // blocks written past the rope switch stay private (SchedulerConfig)
    Status committed = kv_->commitComputed(chunk.id, seq.tokenIds, seq.numComputed);
    if (!committed.isOk())
      status = committed;
  }
  return status;
}

Status Scheduler::appendToken(SeqId id, int32_t tokenId) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return failedPrecondition("append to unknown sequence " + std::to_string(id));
  it->second.tokenIds.push_back(tokenId);
  return okStatus();
}

Status Scheduler::finishSequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return okStatus();
  if (it->second.running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  seqs_.erase(it);
  return kv_->freeSequence(id);
}

StepBatch Scheduler::makeStepBatch(const SchedulerOutput &out) const {
  StepBatch batch;
  batch.sequences.reserve(out.chunks.size());
  for (const ScheduledChunk &chunk : out.chunks) {
    const Sequence &seq = seqs_.at(chunk.id);
    SequenceStep step;
    step.tokenIds.assign(seq.tokenIds.begin() + chunk.startPosition,
                         seq.tokenIds.begin() + chunk.startPosition + chunk.numTokens);
    step.startPosition = chunk.startPosition;
    step.blockTables = kv_->blockTables(chunk.id);
    step.logits = chunk.wantsLogits ? LogitsWanted::kLast : LogitsWanted::kNone;
    // A prompt rotates alike in one prefill or in chunks (plan.fbs SequenceLengths).
    step.sequenceLength = seq.numTokens();
    batch.sequences.push_back(std::move(step));
  }
  return batch;
}

void Scheduler::followRopeSwitch(Sequence &seq) {
  if (!config_.recomputeAtRopeSwitch || config_.ropeSwitchLength == 0)
    return;
  const bool past = seq.numTokens() > config_.ropeSwitchLength;
  if (seq.numComputed == 0) {
    seq.pastRopeSwitch = past;
    return;
  }
  if (!past || seq.pastRopeSwitch)
    return;
  // Freeing a known sequence cannot fail unless the pool is corrupt (see preemptLatest).
  (void)kv_->freeSequence(seq.id);
  seq.numComputed = 0;
  seq.pastRopeSwitch = true;
}

bool Scheduler::sharesKv(const Sequence &seq) const {
  return config_.ropeSwitchLength == 0 || seq.numTokens() <= config_.ropeSwitchLength;
}

const Sequence *Scheduler::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

} // namespace kiln::rt
