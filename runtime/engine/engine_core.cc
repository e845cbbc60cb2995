#include "runtime/engine/engine_core.h"

#include "runtime/structured/output_constraint.h"

#include <algorithm>
#include <random>
#include <string>

namespace kiln::rt {

struct EngineCore::SampleState {
  SeqId seq = -1; // -1 until a parallel sample is forked from sample 0
  Rng rng{0};
  int32_t numGenerated = 0;
  bool finished = false;
  std::unique_ptr<TextStream> text;
  std::unique_ptr<StopStringFilter> stop;
  std::unique_ptr<structured::OutputConstraint> constraint; // with Request::grammar
  Clock::time_point lastTokenTime;
};

struct EngineCore::RequestState {
  RequestId id = 0;
  Request request;
  Clock::time_point arrival;
  // Engine-clock times for the request-phase histograms (EngineMetrics).
  Clock::time_point queuedAt, firstScheduledAt, firstTokenAt, lastTokenAt;
  bool scheduled = false;
  std::vector<int32_t> stopIds; // sorted: eos (unless ignore_eos) and stop_token_ids
  bool forked = false;
  bool sawFirstToken = false;
  int32_t numUnfinished = 0;
  FinishReason lastReason = FinishReason::kNone;
  Usage usage;
  std::vector<SampleState> samples;
};

namespace {

// The compile flag that raises each compiled maximum, for error messages.
const char *recompileFlag(const std::string &field) {
  if (field == "maxBatch")
    return "recompile with a larger --max-batch";
  if (field == "maxTokensPerStep")
    return "recompile with a larger --max-tokens-per-step";
  if (field == "maxSeqLen")
    return "recompile with a larger --max-seq-len";
  return "the runner's KV pool is smaller";
}

Status pickLimit(int32_t asked, int32_t runnerLimit, const std::string &field, int32_t &out) {
  if (runnerLimit <= 0)
    return invalidArgument("runner limit " + field + " is " + std::to_string(runnerLimit) +
                           "; it must be > 0");
  if (asked < 0)
    return invalidArgument("EngineConfig." + field + " must be >= 0 (0: the runner's limit), got " +
                           std::to_string(asked));
  if (asked > runnerLimit)
    return outOfRange("EngineConfig." + field + " = " + std::to_string(asked) +
                      " exceeds the runner's limit " + std::to_string(runnerLimit) + "; " +
                      recompileFlag(field));
  out = asked == 0 ? runnerLimit : asked;
  return okStatus();
}

KvCacheConfig kvConfigOf(const EngineConfig &config, const EngineLimits &limits) {
  const RunnerLimits &rl = config.runner->limits();
  return {limits.numKvBlocks, rl.blockSize, rl.maxBlocksPerSeq, config.enablePrefixCaching,
          rl.kvGroupWindows};
}

// The longest sequence (at most `limit` tokens) whose blocks, in every KV cache group, fit in the
// pool at once (peakBlocksOfSequence grows with the length).
int32_t longestSequenceInPool(const KvCacheConfig &kv, int32_t limit, int32_t maxChunk) {
  int32_t lo = 0, hi = limit;
  while (lo < hi) {
    const int32_t mid = hi - (hi - lo) / 2;
    if (peakBlocksOfSequence(kv, mid, maxChunk) <= kv.numBlocks)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

Result<EngineLimits> computeLimits(const EngineConfig &config) {
  const RunnerLimits &rl = config.runner->limits();
  EngineLimits l;
  KILN_RETURN_IF_ERROR(pickLimit(config.maxBatch, rl.maxBatch, "maxBatch", l.maxBatch));
  KILN_RETURN_IF_ERROR(pickLimit(config.maxTokensPerStep, rl.maxTokensPerStep, "maxTokensPerStep",
                                 l.maxTokensPerStep));
  KILN_RETURN_IF_ERROR(pickLimit(config.maxSeqLen, rl.maxSeqLen, "maxSeqLen", l.maxSeqLen));
  KILN_RETURN_IF_ERROR(pickLimit(config.numKvBlocks, rl.numKvBlocks, "numKvBlocks", l.numKvBlocks));
  if (rl.blockSize <= 0 || rl.maxBlocksPerSeq <= 0 || rl.vocabSize <= 0)
    return invalidArgument("runner limits blockSize, maxBlocksPerSeq and vocabSize must be > 0");
  l.blockSize = rl.blockSize;
  l.vocabSize = rl.vocabSize;
  // Every running sequence must be able to decode in each step.
  l.maxBatch = std::min(l.maxBatch, l.maxTokensPerStep);
  // A sequence must fit in its block table and, alone, in the pool, or preemption cannot help.
  l.maxSeqLen = std::min(l.maxSeqLen, rl.maxBlocksPerSeq * rl.blockSize);
  l.maxSeqLen = longestSequenceInPool(kvConfigOf(config, l), l.maxSeqLen, l.maxTokensPerStep);
  if (config.maxSamplesPerRequest < 0)
    return invalidArgument("EngineConfig.maxSamplesPerRequest must be >= 0");
  l.maxSamplesPerRequest = config.maxSamplesPerRequest ? config.maxSamplesPerRequest : l.maxBatch;
  for (int32_t id : config.eosTokenIds) {
    if (id < 0 || id >= l.vocabSize)
      return invalidArgument("EngineConfig.eosTokenIds: id " + std::to_string(id) +
                             " outside the vocabulary [0, " + std::to_string(l.vocabSize) + ")");
  }
  return l;
}

} // namespace

EngineCore::EngineCore(const EngineConfig &config, const EngineLimits &limits, KvCacheManager kv)
    : config_(config), limits_(limits), kv_(std::move(kv)) {}

EngineCore::~EngineCore() = default;

Result<std::unique_ptr<EngineCore>> EngineCore::create(const EngineConfig &config) {
  if (!config.runner)
    return invalidArgument("EngineConfig.runner is null");
  KILN_ASSIGN_OR_RETURN(EngineLimits limits, computeLimits(config));
  KILN_ASSIGN_OR_RETURN(KvCacheManager kv, KvCacheManager::create(kvConfigOf(config, limits)));
  std::unique_ptr<EngineCore> core(new EngineCore(config, limits, std::move(kv)));
  SchedulerConfig sc{limits.maxBatch,
                     limits.maxTokensPerStep,
                     limits.maxSeqLen,
                     config.enableChunkedPrefill,
                     config.runner->limits().ropeSwitchLength,
                     config.runner->limits().recomputeAtRopeSwitch};
  KILN_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::create(sc, &core->kv_));
  core->scheduler_.emplace(std::move(scheduler));
  core->defaultSeed_ = config.seed ? *config.seed : std::random_device()();
  core->metrics_.kvBlocksTotal = limits.numKvBlocks;
  core->metrics_.cacheConfig = {limits.blockSize, limits.numKvBlocks, config.enablePrefixCaching};
  return core;
}

Status EngineCore::validate(const Request &request) const {
  if (config_.runner->limits().embeds)
    return failedPrecondition("this model is an embedding model: it embeds text (/v1/embeddings, "
                              "/embed) and cannot generate");
  const auto &prompt = request.promptIds;
  if (prompt.empty())
    return invalidArgument("request prompt is empty");
  for (int32_t id : prompt) {
    if (id < 0 || id >= limits_.vocabSize)
      return invalidArgument("prompt token id " + std::to_string(id) +
                             " outside the vocabulary [0, " + std::to_string(limits_.vocabSize) +
                             ")");
  }
  if (static_cast<int64_t>(prompt.size()) > limits_.maxSeqLen)
    return outOfRange("prompt has " + std::to_string(prompt.size()) + " tokens; max_seq_len is " +
                      std::to_string(limits_.maxSeqLen));
  KILN_RETURN_IF_ERROR(
      validateSamplingParams(request.sampling, limits_.vocabSize, config_.maxLogprobs));
  if (request.sampling.n > limits_.maxSamplesPerRequest)
    return outOfRange("sampling field 'n' is " + std::to_string(request.sampling.n) + "; at most " +
                      std::to_string(limits_.maxSamplesPerRequest) + " is allowed");
  if (!request.sampling.stop.empty() && (!config_.stopStrings || !config_.detokenizer))
    return unimplemented("stop strings need a detokenizer and a stop-string matcher; this engine "
                         "has none");
  if (request.grammar && !config_.vocabulary)
    return unimplemented("structured outputs need the model's tokenizer (its token bytes); this "
                         "engine has none");
  if (request.embed) {
    if (config_.runner->limits().hiddenWidth <= 0)
      return failedPrecondition("this model's plan does not return its final hidden states, so "
                                "it cannot embed");
    if (request.sampling.n != 1 || request.grammar)
      return invalidArgument("an embedding request takes one sample and no structured output");
  }
  return okStatus();
}

void EngineCore::emit(RequestOutput output) {
  if (output.requestFinished)
    retired_.push_back(output.requestId);
  outputs_.push_back(std::move(output));
}

std::vector<RequestOutput> EngineCore::takeOutputs() {
  std::vector<RequestOutput> out;
  out.swap(outputs_);
  return out;
}

void EngineCore::retireFinished() {
  for (RequestId id : retired_)
    requests_.erase(id);
  retired_.clear();
}

Status EngineCore::openTextHooks(RequestState &req, int32_t index) {
  SampleState &s = req.samples[index];
  if (config_.detokenizer)
    s.text = config_.detokenizer->openStream(req.request.promptIds,
                                             req.request.sampling.skipSpecialTokens);
  if (!req.request.sampling.stop.empty() && config_.stopStrings) {
    KILN_ASSIGN_OR_RETURN(s.stop, config_.stopStrings->create(req.request.sampling.stop));
  }
  return okStatus();
}

void EngineCore::addRequest(RequestId id, Request request,
                            std::optional<Clock::time_point> arrival) {
  Status status = validate(request);
  if (status.isOk() && requests_.count(id))
    status = invalidArgument("request id " + std::to_string(id) + " is already in use");
  const int32_t promptLen = static_cast<int32_t>(request.promptIds.size());
  auto req = std::make_unique<RequestState>();
  req->id = id;
  req->queuedAt = now();
  req->arrival = arrival.value_or(req->queuedAt);
  req->usage.promptTokens = promptLen;
  const SamplingParams &params = request.sampling;
  req->stopIds = params.stopTokenIds;
  if (!params.ignoreEos)
    req->stopIds.insert(req->stopIds.end(), config_.eosTokenIds.begin(), config_.eosTokenIds.end());
  std::sort(req->stopIds.begin(), req->stopIds.end());
  const uint64_t seed = params.seed ? *params.seed : Rng(defaultSeed_ ^ id).next();
  req->samples.resize(status.isOk() ? params.n : 0);
  for (int32_t i = 0; i < static_cast<int32_t>(req->samples.size()); ++i) {
    req->samples[i].rng = rngForSample(seed, i);
    if (request.grammar) // (req->request is set from `request` below)
      req->samples[i].constraint = std::make_unique<structured::OutputConstraint>(
          request.grammar, config_.vocabulary, automatonFor(request.grammar));
  }
  req->numUnfinished = static_cast<int32_t>(req->samples.size());
  req->request = std::move(request);
  if (status.isOk())
    status = openTextHooks(*req, 0);
  if (status.isOk()) {
    req->samples[0].seq = nextSeqId_++;
    status = scheduler_->addSequence(req->samples[0].seq, req->request.promptIds, nextArrival_++);
  }
  if (!status.isOk()) {
    RequestOutput out;
    out.requestId = id;
    out.finishReason = FinishReason::kError;
    out.error = status;
    out.requestFinished = true;
    out.usage.promptTokens = promptLen;
    outputs_.push_back(std::move(out));
    metrics_.requestsFailed++;
    return;
  }
  seqOwner_[req->samples[0].seq] = {id, 0};
  metrics_.promptTokens += promptLen;
  requests_.emplace(id, std::move(req));
  updateGauges();
}

void EngineCore::abortRequest(RequestId id) {
  endRequest(id, FinishReason::kAbort, okStatus());
  retireFinished();
  updateGauges();
}

void EngineCore::endRequest(RequestId id, FinishReason reason, const Status &status) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return;
  RequestState &req = *it->second;
  for (int32_t i = 0; i < static_cast<int32_t>(req.samples.size()); ++i) {
    if (req.samples[i].finished)
      continue;
    RequestOutput out;
    out.requestId = id;
    out.index = i;
    out.error = status;
    finishSample(req, i, reason, false, out);
    emit(std::move(out));
  }
}

void EngineCore::failOwnerOf(SeqId seq, const Status &status) {
  auto owner = seqOwner_.find(seq);
  if (owner != seqOwner_.end())
    endRequest(owner->second.first, FinishReason::kError, status);
}

std::string EngineCore::flushText(RequestState &req, int32_t index) {
  SampleState &s = req.samples[index];
  std::string tail = s.text ? s.text->flush() : std::string();
  if (!s.stop)
    return tail;
  StopCheck check = s.stop->push(tail);
  return check.stopped ? check.text : check.text + s.stop->flush();
}

void EngineCore::finishSample(RequestState &req, int32_t index, FinishReason reason,
                              bool stoppedByString, RequestOutput &out) {
  SampleState &s = req.samples[index];
  if (!stoppedByString)
    out.text += flushText(req, index);
  s.finished = true;
  --req.numUnfinished;
  if (s.seq >= 0) {
    if (const Sequence *seq = scheduler_->find(s.seq))
      req.usage.cachedPromptTokens =
          std::max(req.usage.cachedPromptTokens, seq->numCachedPromptTokens);
    (void)scheduler_->finishSequence(s.seq);
    seqOwner_.erase(s.seq);
  }
  out.finishReason = reason;
  req.lastReason = reason;
  if (req.numUnfinished > 0)
    return;
  out.requestFinished = true;
  out.usage = req.usage;
  observeRequestTimes(req);
  if (reason == FinishReason::kAbort)
    metrics_.requestsAborted++;
  else if (reason == FinishReason::kError)
    metrics_.requestsFailed++;
  else
    metrics_.requestsFinished++;
}

Status EngineCore::checkStepOutput(const StepOutput &out, const SchedulerOutput &plan) const {
  const size_t n = plan.chunks.size();
  if (out.vocabSize != limits_.vocabSize)
    return internalError("runner returned vocabSize " + std::to_string(out.vocabSize) +
                         ", expected " + std::to_string(limits_.vocabSize));
  if (out.rowsPerSequence.size() != n || out.firstRowOfSequence.size() != n)
    return internalError("runner returned rows for " + std::to_string(out.rowsPerSequence.size()) +
                         " sequences, expected " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (!plan.chunks[i].wantsLogits)
      continue;
    const int32_t first = out.firstRowOfSequence[i], rows = out.rowsPerSequence[i];
    if (rows < 1 || first < 0 || first + rows > out.numRows())
      return internalError("runner returned no logits row for batch sequence " + std::to_string(i));
  }
  return okStatus();
}

void EngineCore::handleStall() {
  // Nothing scheduled with work left and nothing running: the head of the queue cannot fit even
  // in an empty pool. Limits make this unreachable; failing the head keeps the engine live.
  if (scheduler_->numRunning() == 0 && scheduler_->numWaiting() > 0)
    failOwnerOf(scheduler_->waitingQueue().front(),
                resourceExhausted("KV cache: sequence does not fit in the pool of " +
                                  std::to_string(limits_.numKvBlocks) + " blocks"));
}

void EngineCore::observeRequestTimes(const RequestState &req) {
  if (!req.sawFirstToken)
    return; // aborted or failed before its first token: no phase ended
  using Seconds = std::chrono::duration<double>;
  metrics_.requestQueueTime.observe(Seconds(req.firstScheduledAt - req.queuedAt).count());
  metrics_.requestPrefillTime.observe(Seconds(req.firstTokenAt - req.firstScheduledAt).count());
  metrics_.requestDecodeTime.observe(Seconds(req.lastTokenAt - req.firstTokenAt).count());
}

uint64_t EngineCore::recordAdmissions(const SchedulerOutput &plan,
                                      const std::vector<SeqId> &wasRunning,
                                      Clock::time_point scheduledAt) {
  uint64_t queried = 0;
  for (const ScheduledChunk &chunk : plan.chunks) {
    if (std::binary_search(wasRunning.begin(), wasRunning.end(), chunk.id))
      continue;
    // Admitted from the waiting queue: the scheduler looked its tokens up in the prefix cache.
    if (config_.enablePrefixCaching)
      if (const Sequence *seq = scheduler_->find(chunk.id))
        queried += static_cast<uint64_t>(seq->numTokens());
    auto owner = seqOwner_.find(chunk.id);
    if (owner == seqOwner_.end())
      continue;
    RequestState &req = *requests_.at(owner->second.first);
    if (!req.scheduled) {
      req.scheduled = true;
      req.firstScheduledAt = scheduledAt;
    }
  }
  return queried;
}

void EngineCore::step() {
  metrics_.steps++;
  const Clock::time_point scheduledAt = now();
  std::vector<SeqId> wasRunning = scheduler_->runningQueue();
  std::sort(wasRunning.begin(), wasRunning.end());
  lastSchedule_ = scheduler_->schedule();
  const SchedulerOutput &plan = lastSchedule_;
  const uint64_t queried = recordAdmissions(plan, wasRunning, scheduledAt);
  metrics_.preemptions += plan.preempted.size();
  for (const auto &[seq, status] : plan.failed)
    failOwnerOf(seq, status);
  if (plan.chunks.empty()) {
    handleStall();
  } else {
    StepBatch batch = scheduler_->makeStepBatch(plan);
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      SequenceStep &seq = batch.sequences[i];
      if (seq.logits == LogitsWanted::kLast && embeds(plan.chunks[i].id))
        seq.wantsHidden = true;
      else if (seq.logits == LogitsWanted::kLast && samplesByArgmax(plan.chunks[i].id))
        seq.logits = LogitsWanted::kArgmax;
    }
    Result<StepOutput> result = config_.runner->execute(batch);
    Status status = result.isOk() ? checkStepOutput(*result, plan) : result.status();
    if (status.isOk())
      status = scheduler_->onStepComputed(plan);
    if (!status.isOk()) {
      metrics_.failedSteps++;
      for (const ScheduledChunk &chunk : plan.chunks)
        failOwnerOf(chunk.id, status.withContext("model step"));
    } else {
      stepTokenTime_ = now();
      metrics_.computedTokens += plan.numTokens;
      metrics_.cachedTokens += plan.numCachedTokens;
      metrics_.prefixCacheQueries += queried;
      metrics_.iterationTokens.observe(plan.numTokens);
      const StepOutput &out = *result;
      for (size_t i = 0; i < plan.chunks.size(); ++i) {
        if (!plan.chunks[i].wantsLogits)
          continue;
        const int32_t row = out.firstRowOfSequence[i] + out.rowsPerSequence[i] - 1;
        if (batch.sequences[i].wantsHidden) {
          if (out.hiddenWidth <= 0 || out.hidden.size() < size_t(row + 1) * out.hiddenWidth)
            failOwnerOf(plan.chunks[i].id,
                        internalError("the runner returned no hidden states for batch sequence " +
                                      std::to_string(i)));
          else
            processHidden(plan.chunks[i].id,
                          std::span<const float>(out.hiddenRow(row), out.hiddenWidth));
        } else if (!out.argmaxIds.empty())
          processArgmax(plan.chunks[i].id, out.argmaxIds[row]);
        else
          processLogits(plan.chunks[i].id, std::span<const float>(out.row(row), out.vocabSize));
      }
    }
  }
  retireFinished();
  updateGauges();
}

std::shared_ptr<structured::GrammarAutomaton>
EngineCore::automatonFor(const std::shared_ptr<const structured::Grammar> &grammar) {
  constexpr size_t kKeptUnused = 8;
  if (auto it = automata_.find(grammar.get()); it != automata_.end())
    return it->second.second;
  if (automata_.size() >= kKeptUnused) // drop the ones no request uses now
    for (auto it = automata_.begin(); it != automata_.end();)
      it = it->second.second.use_count() == 1 ? automata_.erase(it) : std::next(it);
  auto automaton = std::make_shared<structured::GrammarAutomaton>(grammar, config_.vocabulary);
  automata_[grammar.get()] = {grammar, automaton};
  return automaton;
}

void EngineCore::updateGauges() {
  metrics_.numRunning = scheduler_->numRunning();
  metrics_.numWaiting = scheduler_->numWaiting();
  metrics_.kvBlocksUsed = kv_.pool().numUsedBlocks();
}

Result<SampledToken> EngineCore::sampleFor(RequestState &req, int32_t index,
                                           std::span<const float> row,
                                           std::span<const int32_t> tokenIds) {
  SampleState &s = req.samples[index];
  const size_t promptLen = req.request.promptIds.size();
  SamplingHistory history;
  history.promptIds = tokenIds.first(promptLen);
  history.outputIds = tokenIds.subspan(promptLen);
  if (s.numGenerated < req.request.sampling.minTokens)
    history.suppressedIds = req.stopIds;
  std::vector<uint8_t> allowed;
  if (s.constraint) {
    allowed = s.constraint->allowedMask(req.stopIds);
    if (std::find(allowed.begin(), allowed.end(), uint8_t{1}) == allowed.end())
      return failedPrecondition("structured output: no token of the vocabulary continues the "
                                "grammar after " +
                                std::to_string(s.numGenerated) + " tokens");
    history.allowedMask = allowed;
  }
  return sampleToken(row, req.request.sampling, history, s.rng);
}

bool EngineCore::embeds(SeqId seq) const {
  auto owner = seqOwner_.find(seq);
  return owner != seqOwner_.end() && requests_.at(owner->second.first)->request.embed;
}

void EngineCore::processHidden(SeqId seq, std::span<const float> row) {
  auto owner = seqOwner_.find(seq);
  if (owner == seqOwner_.end())
    return; // its request ended earlier in this step
  RequestState &req = *requests_.at(owner->second.first);
  RequestOutput out;
  out.requestId = req.id;
  out.index = owner->second.second;
  out.embedding.assign(row.begin(), row.end());
  finishSample(req, out.index, FinishReason::kStop, false, out);
  emit(std::move(out));
}

void EngineCore::processLogits(SeqId seq, std::span<const float> row) {
  auto owner = seqOwner_.find(seq);
  if (owner == seqOwner_.end())
    return; // its request ended earlier in this step
  RequestState &req = *requests_.at(owner->second.first);
  const int32_t index = owner->second.second;
  if (req.request.sampling.n > 1 && !req.forked) {
    forkSamples(req, row);
    return;
  }
  const Sequence *sequence = scheduler_->find(seq);
  Result<SampledToken> sampled = sampleFor(req, index, row, sequence->tokenIds);
  if (!sampled.isOk()) {
    endRequest(req.id, FinishReason::kError, sampled.status());
    return;
  }
  (void)scheduler_->appendToken(seq, sampled->tokenId);
  onTokenSampled(req, index, *sampled);
}

// What sampleToken does for this sequence's next token is argmaxToken of the raw row: greedy,
// no penalties, nothing suppressed, no logprobs, and no parallel samples left to fork.
bool EngineCore::samplesByArgmax(SeqId seq) const {
  auto owner = seqOwner_.find(seq);
  if (owner == seqOwner_.end())
    return false;
  const RequestState &req = *requests_.at(owner->second.first);
  const SamplingParams &p = req.request.sampling;
  if ((p.n > 1 && !req.forked) || req.request.grammar || p.temperature >= kGreedyTemperature ||
      p.logprobs || p.repetitionPenalty != 1.0f || p.presencePenalty != 0.0f ||
      p.frequencyPenalty != 0.0f)
    return false;
  return req.stopIds.empty() || req.samples[owner->second.second].numGenerated >= p.minTokens;
}

void EngineCore::processArgmax(SeqId seq, int32_t tokenId) {
  auto owner = seqOwner_.find(seq);
  if (owner == seqOwner_.end())
    return; // its request ended earlier in this step
  RequestState &req = *requests_.at(owner->second.first);
  if (tokenId < 0 || tokenId >= limits_.vocabSize) {
    endRequest(req.id, FinishReason::kError, noTokenLeftError(limits_.vocabSize));
    return;
  }
  (void)scheduler_->appendToken(seq, tokenId);
  onTokenSampled(req, owner->second.second, SampledToken{tokenId, std::nullopt});
}

void EngineCore::forkSamples(RequestState &req, std::span<const float> row) {
  req.forked = true;
  const int32_t n = req.request.sampling.n;
  std::vector<SampledToken> sampled;
  for (int32_t i = 0; i < n; ++i) {
    Result<SampledToken> token = sampleFor(req, i, row, req.request.promptIds);
    if (!token.isOk())
      return endRequest(req.id, FinishReason::kError, token.status());
    sampled.push_back(std::move(token).value());
  }
  const SeqId parent = req.samples[0].seq;
  for (int32_t i = 1; i < n; ++i) {
    const SeqId child = nextSeqId_++;
    Status status = scheduler_->forkSequence(parent, child, sampled[i].tokenId);
    if (status.isOk())
      status = openTextHooks(req, i);
    if (!status.isOk())
      return endRequest(req.id, FinishReason::kError, status);
    req.samples[i].seq = child;
    seqOwner_[child] = {req.id, i};
  }
  (void)scheduler_->appendToken(parent, sampled[0].tokenId);
  for (int32_t i = 0; i < n; ++i)
    onTokenSampled(req, i, sampled[i]);
}

FinishReason EngineCore::appendText(RequestState &req, int32_t index, int32_t token,
                                    RequestOutput &out) {
  SampleState &s = req.samples[index];
  if (!s.text)
    return FinishReason::kNone;
  std::string delta = s.text->append(token);
  if (!s.stop) {
    out.text = std::move(delta);
    return FinishReason::kNone;
  }
  StopCheck check = s.stop->push(delta);
  out.text = std::move(check.text);
  return check.stopped ? FinishReason::kStop : FinishReason::kNone;
}

void EngineCore::onTokenSampled(RequestState &req, int32_t index, const SampledToken &sampled) {
  SampleState &s = req.samples[index];
  const Clock::time_point tokenTime = stepTokenTime_;
  if (!req.sawFirstToken) {
    req.sawFirstToken = true;
    req.firstTokenAt = tokenTime;
    metrics_.timeToFirstToken.observe(
        std::chrono::duration<double>(tokenTime - req.arrival).count());
  }
  req.lastTokenAt = tokenTime;
  if (s.numGenerated > 0)
    metrics_.interTokenLatency.observe(
        std::chrono::duration<double>(tokenTime - s.lastTokenTime).count());
  s.lastTokenTime = tokenTime;
  ++s.numGenerated;
  ++req.usage.completionTokens;
  metrics_.generationTokens++;

  RequestOutput out;
  out.requestId = req.id;
  out.index = index;
  out.tokenIds.push_back(sampled.tokenId);
  if (sampled.logprobs)
    out.logprobs.push_back(*sampled.logprobs);
  FinishReason reason = FinishReason::kNone;
  bool byString = false;
  if (std::binary_search(req.stopIds.begin(), req.stopIds.end(), sampled.tokenId)) {
    reason = FinishReason::kStop; // stop tokens are not detokenized
  } else {
    if (s.constraint && !s.constraint->accept(sampled.tokenId)) {
      endRequest(req.id, FinishReason::kError,
                 internalError("structured output: sampled token " +
                               std::to_string(sampled.tokenId) + " the grammar does not allow"));
      return;
    }
    reason = appendText(req, index, sampled.tokenId, out);
    byString = reason == FinishReason::kStop;
    if (reason == FinishReason::kNone && s.constraint && s.constraint->mustEnd())
      reason = FinishReason::kStop; // the grammar is complete: only the end can follow
  }
  if (reason == FinishReason::kNone) {
    const std::optional<int32_t> &maxTokens = req.request.sampling.maxTokens;
    const Sequence *seq = scheduler_->find(s.seq);
    if ((maxTokens && s.numGenerated >= *maxTokens) ||
        (seq && seq->numTokens() >= limits_.maxSeqLen))
      reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone)
    finishSample(req, index, reason, byString, out);
  emit(std::move(out));
}

} // namespace kiln::rt
