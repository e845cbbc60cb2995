#include "runtime/exec/executor.h"

#include "runtime/ops/op_table.h"

#include "runtime/exec/communicator.h"
#include "runtime/exec/elements.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

namespace kiln::rt {
namespace {

RunnerLimits limitsOf(const schema::Plan &plan) {
  RunnerLimits limits;
  limits.maxBatch = static_cast<int32_t>(plan.limits()->max_batch());
  limits.maxTokensPerStep = static_cast<int32_t>(plan.limits()->max_tokens_per_step());
  // Plans written before max_logits_per_step hold logits for every token of a step.
  const uint32_t maxLogits = plan.limits()->max_logits_per_step();
  limits.maxLogitsPerStep = maxLogits ? static_cast<int32_t>(maxLogits) : limits.maxTokensPerStep;
  limits.maxSeqLen = static_cast<int32_t>(plan.limits()->max_seq_len());
  limits.maxBlocksPerSeq = static_cast<int32_t>(plan.limits()->max_blocks_per_seq());
  limits.blockSize = static_cast<int32_t>(plan.kv_cache()->block_size());
  limits.vocabSize = static_cast<int32_t>(plan.model()->vocab_size());
  limits.embeds = plan.output() == schema::PlanOutput::HiddenStates;
  limits.decoderStartTokenId = plan.model()->decoder_start_token_id();
  limits.typeVocabSize = static_cast<int32_t>(plan.model()->type_vocab_size());
  // An embedding plan older than token types (schema < 13; BERT's folded type 0 into its words):
  // -1, unknown, so a text pair is refused rather than embedded as one type.
  if (plan.schema_version() < 13 && limits.embeds)
    limits.typeVocabSize = -1;
  limits.outputWidth =
      limits.embeds ? static_cast<int32_t>(plan.model()->hidden_size()) : limits.vocabSize;
  if (const auto *groups = plan.kv_cache()->groups())
    for (const schema::KvCacheGroup *group : *groups)
      limits.kvGroupWindows.push_back(static_cast<int32_t>(group->sliding_window()));
  for (const schema::Op *op : *plan.ranks()->Get(0)->program())
    if (const auto *rope = op->params_as_RopeKvWriteParams();
        rope && rope->mode() != schema::RopeMode::Static) {
      const auto length = static_cast<int32_t>(rope->original_max_positions());
      limits.ropeSwitchLength =
          limits.ropeSwitchLength ? std::min(limits.ropeSwitchLength, length) : length;
      limits.recomputeAtRopeSwitch =
          limits.recomputeAtRopeSwitch || rope->mode() == schema::RopeMode::LongShort;
    }
  return limits;
}

// The pool size the options ask for, from the bytes of one KV block.
Result<int32_t> kvBlockCount(const schema::KvCacheSpec &kv, const ExecutorOptions &options,
                             size_t blockBytes) {
  int64_t blocks = options.numKvBlocks;
  if (options.numKvBlocks < 0)
    return invalidArgument("numKvBlocks is " + std::to_string(options.numKvBlocks) +
                           "; it must be >= 0 (0: derive from kvCacheBytes)");
  if (blocks == 0)
    blocks = static_cast<int64_t>(options.kvCacheBytes / blockBytes);
  if (blocks == 0)
    return resourceExhausted(
        "KV cache of " + std::to_string(options.kvCacheBytes) +
        " bytes holds no block: one block (K and V of every layer it holds) is " +
        std::to_string(blockBytes) + " bytes");
  // Slots (block * block_size + offset) are int32 step inputs.
  int64_t maxBlocks = std::numeric_limits<int32_t>::max() / kv.block_size();
  return static_cast<int32_t>(std::min(blocks, maxBlocks));
}

bool isCollective(schema::OpParams kind) {
  const OpEntry *entry = findOp(kind);
  return entry && entry->collective;
}

Status checkCommunicator(const Artifact &artifact, const Device &device,
                         const ExecutorOptions &options) {
  uint32_t tp = artifact.plan().tp();
  if (tp == 1)
    return okStatus();
  if (!options.communicator)
    return failedPrecondition("artifact '" + artifact.directory() + "' is compiled for " +
                              std::to_string(tp) +
                              "-way tensor parallelism: run its ranks "
                              "together (MultiRankRunner), not one executor alone");
  if (options.communicator->worldSize() != static_cast<int>(tp))
    return invalidArgument("the communicator connects " +
                           std::to_string(options.communicator->worldSize()) +
                           " ranks but the artifact has tp " + std::to_string(tp));
  if (!options.communicator->supports(device.kind()))
    return unimplemented("tensor parallelism on device '" + device.name() +
                         "': this communicator cannot reach its memory (the cpu "
                         "communicator serves cpu devices; GPUs need NCCL or the staged one)");
  return okStatus();
}

} // namespace

Executor::Executor(const Artifact &artifact, Device &device, int rank)
    : artifact_(artifact), device_(device), rank_(artifact.rank(rank)),
      limits_(limitsOf(artifact.plan())), hostInputs_(limits_) {}

Executor::~Executor() {
  graphs_.clear();
  program_.clear();
  for (DeviceMemory &memory : memory_)
    device_.free(memory);
}

Result<std::unique_ptr<Executor>> Executor::create(const Artifact &artifact, Device &device,
                                                   const ExecutorOptions &options) {
  if (options.rank < 0 || options.rank >= artifact.numRanks() || !artifact.hasWeights(options.rank))
    return invalidArgument("executor rank " + std::to_string(options.rank) + " is not a rank of '" +
                           artifact.directory() + "' whose weights were loaded (" +
                           std::to_string(artifact.numRanks()) + " rank(s))");
  if (Status loaded = device.loadPlan(artifact.plan()); !loaded.isOk())
    return loaded.withContext("artifact '" + artifact.directory() + "'");
  KILN_RETURN_IF_ERROR(checkCommunicator(artifact, device, options));
  std::unique_ptr<Executor> executor(new Executor(artifact, device, options.rank));
  executor->communicator_ = options.communicator;
  executor->log_ = options.log;
  KILN_RETURN_IF_ERROR(executor->allocate(options));
  KILN_RETURN_IF_ERROR(executor->bindProgram());
  // Last, so that a cache sized from free memory sees everything else already allocated
  // (including what ops allocate when prepared: cuBLASLt workspace, op scratch such as the
  // split-K attention partials and the routed MoE rows).
  KILN_RETURN_IF_ERROR(executor->allocateKvCache(options));
  // Collectives run on the host between device ops, so a tp > 1 step cannot be one graph.
  executor->captureGraphs_ = options.decodeBuckets == DecodeBuckets::kAuto &&
                             device.supportsGraphs() && artifact.plan().tp() == 1 &&
                             !options.communicator;
  if (executor->captureGraphs_ || options.decodeBuckets == DecodeBuckets::kPadOnly)
    executor->decodeBuckets_ = decodeBatchBuckets(executor->limits_);
  if (executor->captureGraphs_)
    executor->graphs_.resize(executor->decodeBuckets_.size());
  return executor;
}

Result<DeviceMemory> Executor::track(Result<DeviceMemory> memory) {
  if (memory.isOk())
    memory_.push_back(*memory);
  return memory;
}

Status Executor::allocate(const ExecutorOptions &options) {
  const schema::KvCacheSpec &kv = *artifact_.plan().kv_cache();
  KILN_ASSIGN_OR_RETURN(kvLayout_, kvLayoutOf(kv));
  // A block holds K and V of one layer per storage slot (plan.fbs "KV cache groups").
  kvBlockBytes_ = 2 * size_t(kvLayout_.numSlots) * kv.num_kv_heads() * kv.block_size() *
                  kv.head_dim() * dtypeSize(kv.dtype());
  KILN_ASSIGN_OR_RETURN(DeviceMemory weights,
                        track(device_.importWeights(artifact_.weightsFile(options.rank))));
  KILN_ASSIGN_OR_RETURN(DeviceMemory arena,
                        track(device_.allocate(rank_.arena_bytes(), MemoryKind::kDevice)));
  weights_ = weights.data;
  arena_ = arena.data;
  // Ops are prepared before the cache exists: they keep &kvCache_ and read its pointers per step.
  kvCache_.blockSize = limits_.blockSize;
  kvCache_.dtype = kv.dtype();
  kvCache_.keys.assign(kv.num_layers(), nullptr);
  kvCache_.values.assign(kv.num_layers(), nullptr);
  kvCache_.kScales.assign(kv.num_layers(), 1.0f);
  kvCache_.vScales.assign(kv.num_layers(), 1.0f);
  if (kv.k_scales() && kv.k_scales()->size() == kv.num_layers()) // else empty (plan_check.cc)
    kvCache_.kScales.assign(kv.k_scales()->begin(), kv.k_scales()->end());
  if (kv.v_scales() && kv.v_scales()->size() == kv.num_layers())
    kvCache_.vScales.assign(kv.v_scales()->begin(), kv.v_scales()->end());
  for (const schema::Buffer *b : *rank_.buffers()) {
    BoundBuffer bound;
    bound.dtype = b->dtype();
    bound.rows = b->rows();
    bound.kind = b->kind();
    bound.fixedRows = static_cast<int64_t>(b->shape()->Get(0));
    bound.groupSize = b->group_size();
    for (uint32_t i = 1; i < b->shape()->size(); ++i)
      bound.width *= static_cast<int64_t>(b->shape()->Get(i));
    if (b->kind() == schema::BufferKind::Weight) {
      bound.data = static_cast<uint8_t *>(weights_) + rank_.weights()->Get(b->weight())->offset();
    } else if (b->kind() == schema::BufferKind::Activation) {
      bound.data = static_cast<uint8_t *>(arena_) + b->arena_offset();
    } else {
      KILN_ASSIGN_OR_RETURN(DeviceMemory input,
                            track(device_.allocate(b->size_bytes(), MemoryKind::kHostVisible)));
      bound.data = input.data;
      stepInputs_.push_back({b->step_input(), b->kv_group(), input.data});
    }
    buffers_.push_back(bound);
  }
  if (device_.canArgmaxRows()) { // one id per logits row of a greedy step
    KILN_ASSIGN_OR_RETURN(DeviceMemory ids,
                          track(device_.allocate(sizeof(int32_t) * std::max(limits_.maxBatch, 1),
                                                 MemoryKind::kDevice)));
    argmaxIds_ = ids.data;
  }
  return okStatus();
}

// --gpu-memory-utilization: the cache takes what keeps the device's used memory at or below
// `utilization` of its total, after everything else is allocated.
Result<int32_t> Executor::kvBlocksForUtilization(double utilization) {
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), "%.2f", utilization);
  if (!(utilization > 0.0 && utilization <= 1.0))
    return invalidArgument(std::string("--gpu-memory-utilization is ") + fraction +
                           "; it must be in (0, 1]");
  KILN_ASSIGN_OR_RETURN(DeviceMemoryInfo info, device_.memoryInfo());
  const size_t used = info.totalBytes - std::min(info.freeBytes, info.totalBytes);
  const double limit = std::floor(utilization * static_cast<double>(info.totalBytes));
  const double budget = limit - static_cast<double>(used);
  if (budget < static_cast<double>(kvBlockBytes_))
    return resourceExhausted(
        std::string("--gpu-memory-utilization ") + fraction +
        " leaves no room for the KV cache on " + device_.name() + ": " + std::to_string(used) +
        " of " + std::to_string(info.totalBytes) + " bytes are in use after loading the weights (" +
        std::to_string(artifact_.weightsFile(rank_.rank()).size()) +
        " bytes) and the activation arena (" + std::to_string(rank_.arena_bytes()) +
        " bytes), the limit is " + std::to_string(static_cast<size_t>(limit)) +
        " bytes, and one KV block (K and V of every layer it holds) needs " +
        std::to_string(kvBlockBytes_) +
        " bytes; raise --gpu-memory-utilization or free device memory");
  return static_cast<int32_t>(
      std::min<double>(std::floor(budget / kvBlockBytes_), std::numeric_limits<int32_t>::max()));
}

Status Executor::allocateKvCache(const ExecutorOptions &options) {
  const schema::KvCacheSpec &kv = *artifact_.plan().kv_cache();
  int32_t blocks = 0;
  if (options.memoryUtilization != 0.0) {
    KILN_ASSIGN_OR_RETURN(blocks, kvBlocksForUtilization(options.memoryUtilization));
  } else {
    KILN_ASSIGN_OR_RETURN(blocks, kvBlockCount(kv, options, kvBlockBytes_));
  }
  // Slots (block * block_size + offset) are int32 step inputs.
  blocks = std::min<int32_t>(blocks, std::numeric_limits<int32_t>::max() / kv.block_size());
  KILN_ASSIGN_OR_RETURN(DeviceMemory cache,
                        track(device_.allocate(kvBlockBytes_ * blocks, MemoryKind::kDevice)));
  limits_.numKvBlocks = blocks;
  kvCache_.numBlocks = blocks;
  const size_t slotBytes = kvBlockBytes_ / (2 * size_t(kvLayout_.numSlots)) * blocks;
  for (uint32_t l = 0; l < kv.num_layers(); ++l) {
    const size_t slot = kvLayout_.slotOfLayer[l];
    kvCache_.keys[l] = static_cast<uint8_t *>(cache.data) + (2 * slot) * slotBytes;
    kvCache_.values[l] = static_cast<uint8_t *>(cache.data) + (2 * slot + 1) * slotBytes;
  }
  return okStatus();
}

Status Executor::bindProgram() {
  const schema::Buffer &logits = *rank_.buffers()->Get(rank_.logits());
  if (logits.dtype() != schema::DType::F32)
    return unimplemented("logits buffer '" + logits.name()->str() + "' has dtype " +
                         dtypeName(logits.dtype()) + "; the executor returns F32 logits only");
  logits_ = buffers_[rank_.logits()].data;
  findHiddenRows();
  for (const schema::Op *op : *rank_.program()) {
    if (isCollective(op->params_type())) {
      if (!communicator_)
        return failedPrecondition("op '" + op->name()->str() + "' (" +
                                  opKindName(op->params_type()) + ") needs a communicator");
      ProgramStep step;
      step.collective = op->params_type();
      step.in = buffers_[op->inputs()->Get(0)];
      step.out = buffers_[op->outputs()->Get(0)];
      if (step.in.dtype != step.out.dtype)
        return invalidArgument("op '" + op->name()->str() + "': input " + dtypeName(step.in.dtype) +
                               " and output " + dtypeName(step.out.dtype) + " dtypes differ");
      program_.push_back(std::move(step));
      continue;
    }
    BoundOp bound;
    bound.op = op;
    bound.kvCache = &kvCache_;
    for (uint32_t index : *op->inputs())
      bound.inputs.push_back(buffers_[index]);
    for (uint32_t index : *op->outputs())
      bound.outputs.push_back(buffers_[index]);
    auto prepared = device_.prepareOp(bound);
    if (!prepared.isOk())
      return prepared.status().withContext("artifact '" + artifact_.directory() + "'");
    ProgramStep step;
    step.prepared = std::move(prepared).value();
    program_.push_back(std::move(step));
  }
  return okStatus();
}

Status Executor::runCollective(const ProgramStep &step, const StepCounts &counts) {
  // A communicator that reads what the device wrote needs everything queued to have landed; one
  // that queues behind the device's work (NCCL on the rank's stream) does not.
  if (!communicator_->queuesBehindDeviceWork())
    KILN_RETURN_IF_ERROR(device_.synchronize());
  size_t rows = static_cast<size_t>(counts.rows(step.in.rows, step.in.fixedRows));
  if (step.collective == schema::OpParams::AllReduceParams)
    return communicator_->allReduceSum(rank_.rank(), step.in.data, step.out.data,
                                       rows * step.in.width, step.in.dtype);
  return communicator_->allGatherColumns(rank_.rank(), step.in.data, step.out.data, rows,
                                         step.in.width, step.out.width, step.in.dtype);
}

Status Executor::runProgramStep(const ProgramStep &step, const StepCounts &counts) {
  return step.prepared ? device_.runOp(*step.prepared, counts) : runCollective(step, counts);
}

Status Executor::runProgram(const StepCounts &counts) {
  for (const ProgramStep &step : program_)
    KILN_RETURN_IF_ERROR(runProgramStep(step, counts));
  return okStatus();
}

// The first step of a bucket runs uncaptured, so lazily loaded kernels and cuBLASLt's first-call
// setup happen outside a capture; the bucket is then captured (recording runs nothing) and every
// later step of it is one replay. A bucket whose capture fails keeps running uncaptured: the
// uncaptured run already produced this step's outputs, and graphFailure() says why.
Status Executor::runDecodeGraph(size_t bucket, const StepCounts &counts) {
  if (eagerBuckets_.size() != graphs_.size())
    eagerBuckets_.assign(graphs_.size(), false);
  std::unique_ptr<CapturedProgram> &graph = graphs_[bucket];
  if (graph)
    return device_.replay(*graph);
  KILN_RETURN_IF_ERROR(runProgram(counts));
  if (eagerBuckets_[bucket])
    return okStatus();
  KILN_RETURN_IF_ERROR(device_.beginCapture());
  Status recorded = runProgram(counts);
  Result<std::unique_ptr<CapturedProgram>> captured = device_.endCapture();
  const std::string what =
      "capturing the decode graph of batch bucket " + std::to_string(decodeBuckets_[bucket]);
  if (recorded.isOk() && captured.isOk()) {
    graph = std::move(captured).value();
    return okStatus();
  }
  eagerBuckets_[bucket] = true;
  graphFailure_ = (recorded.isOk() ? captured.status() : recorded).withContext(what);
  if (log_)
    log_(graphFailure_.message() + "; this batch size runs without a graph");
  return okStatus();
}

Result<StepCounts> Executor::stageInputs(const StepBatch &batch, StepOutput &out,
                                         StepCounts &counts, std::optional<size_t> &bucket) {
  KILN_RETURN_IF_ERROR(validateStep(batch, limits_));
  KILN_RETURN_IF_ERROR(validateLogitsRows(batch, limits_));
  counts = fillStepInputs(batch, limits_, hostInputs_, out);
  StepCounts run = counts;
  bucket.reset();
  if (!decodeBuckets_.empty() && isDecodeOnly(counts)) {
    bucket = static_cast<size_t>(
        std::lower_bound(decodeBuckets_.begin(), decodeBuckets_.end(), counts.numSeqs) -
        decodeBuckets_.begin());
    run = padDecodeStep(counts, decodeBuckets_[*bucket], limits_, hostInputs_);
  }
  KILN_RETURN_IF_ERROR(copyStepInputs(run));
  return run;
}

Status Executor::copyStepInputs(const StepCounts &run) {
  for (const StepInputBuffer &input : stepInputs_) {
    std::span<const int32_t> values = hostInputs_.filled(input.kind, run, input.kvGroup);
    KILN_RETURN_IF_ERROR(device_.copyToDevice(input.data, values.data(), values.size_bytes()));
  }
  return okStatus();
}

// A logits plan ends in the final norm, the rows that want logits gathered, and the lm_head Linear
// (then, per plan, a gather of its vocabulary shards and a soft cap): walking back from the logits
// through single-input ops to that Linear finds its input, each row's final hidden state, as wide
// as the model. An embedding plan's output is already those states; a plan that ends otherwise
// has none to give.
void Executor::findHiddenRows() {
  if (limits_.embeds)
    return;
  const auto &program = *rank_.program();
  std::vector<int64_t> producer(buffers_.size(), -1); // index of the op writing each buffer
  for (uint32_t i = 0; i < program.size(); ++i)
    for (uint32_t out : *program.Get(i)->outputs())
      producer[out] = i;
  uint32_t buffer = rank_.logits();
  for (size_t hops = 0; hops < 8 && producer[buffer] >= 0; ++hops) {
    const schema::Op &op = *program.Get(static_cast<uint32_t>(producer[buffer]));
    if (!op.inputs() || op.inputs()->size() == 0)
      return;
    if (op.params_type() != schema::OpParams::LinearParams) {
      buffer = op.inputs()->Get(0);
      continue;
    }
    const BoundBuffer &hidden = buffers_[op.inputs()->Get(0)];
    if (hidden.rows != schema::RowScale::Logits ||
        hidden.width != static_cast<int64_t>(artifact_.plan().model()->hidden_size()))
      return;
    // The arena may give a dead buffer's bytes to a later one: no op after the lm_head may write
    // over the hidden states.
    auto span = [](const BoundBuffer &b) { // [begin, end) of its bytes; empty when unbound
      const auto *begin = static_cast<const uint8_t *>(b.data);
      return std::pair(
          begin, b.data ? begin + b.fixedRows * b.width * int64_t(elementBytes(b.dtype)) : begin);
    };
    const auto [begin, end] = span(hidden);
    for (uint32_t i = static_cast<uint32_t>(producer[buffer]) + 1; i < program.size(); ++i)
      for (uint32_t out : *program.Get(i)->outputs()) {
        const auto [b, e] = span(buffers_[out]);
        if (b < end && begin < e)
          return;
      }
    hidden_ = hidden;
    limits_.hiddenWidth = static_cast<int32_t>(hidden.width);
    return;
  }
}

// The logits buffer holds max_logits_per_step rows (plan.fbs CompiledLimits), so a step asking for
// more (kiln verify's every-token logits) runs as several steps whose rows are concatenated.
Result<StepOutput> Executor::execute(const StepBatch &batch) {
  const bool hidden = std::any_of(batch.sequences.begin(), batch.sequences.end(),
                                  [](const SequenceStep &seq) { return seq.wantsHidden; });
  if (logitsRowsOf(batch) <= limits_.maxLogitsPerStep)
    return executeWithinLogitsRows(batch, hidden);
  KILN_RETURN_IF_ERROR(validateStep(batch, limits_));
  const LogitsPieces split = splitByLogitsRows(batch, limits_.maxLogitsPerStep);
  StepOutput merged;
  merged.vocabSize = limits_.outputWidth;
  merged.rowsPerSequence.assign(batch.sequences.size(), 0);
  merged.firstRowOfSequence.assign(batch.sequences.size(), 0);
  for (size_t p = 0; p < split.pieces.size(); ++p) {
    KILN_ASSIGN_OR_RETURN(StepOutput piece, executeWithinLogitsRows(split.pieces[p], hidden));
    appendPieceOutput(piece, split.sources[p], merged);
  }
  return merged;
}

Result<StepOutput> Executor::executeWithinLogitsRows(const StepBatch &batch, bool hidden) {
  StepOutput out;
  StepCounts counts;
  std::optional<size_t> bucket;
  KILN_ASSIGN_OR_RETURN(const StepCounts run, stageInputs(batch, out, counts, bucket));
  if (bucket && captureGraphs_)
    KILN_RETURN_IF_ERROR(runDecodeGraph(*bucket, run));
  else
    KILN_RETURN_IF_ERROR(runProgram(run));
  // Real logits rows come first; a padded step's extra rows are dropped here.
  out.vocabSize = limits_.outputWidth;
  // One row per kArgmax sequence: 1..maxBatch rows (validateStep), what argmaxIds_ holds.
  if (argmaxIds_ && onlyArgmaxWanted(batch) && !hidden) {
    KILN_RETURN_IF_ERROR(
        device_.argmaxRows(logits_, counts.numLogits, limits_.vocabSize, argmaxIds_));
    KILN_RETURN_IF_ERROR(device_.synchronize());
    out.argmaxIds.resize(static_cast<size_t>(counts.numLogits));
    KILN_RETURN_IF_ERROR(device_.copyToHost(out.argmaxIds.data(), argmaxIds_,
                                            out.argmaxIds.size() * sizeof(int32_t)));
    return out;
  }
  KILN_RETURN_IF_ERROR(device_.synchronize());
  out.logits.resize(static_cast<size_t>(counts.numLogits) * limits_.outputWidth);
  KILN_RETURN_IF_ERROR(
      device_.copyToHost(out.logits.data(), logits_, out.logits.size() * sizeof(float)));
  if (hidden) {
    out.hiddenWidth = limits_.hiddenWidth;
    const size_t values = static_cast<size_t>(counts.numLogits) * limits_.hiddenWidth;
    std::vector<uint8_t> bytes(values * elementBytes(hidden_->dtype));
    KILN_RETURN_IF_ERROR(device_.copyToHost(bytes.data(), hidden_->data, bytes.size()));
    out.hidden.resize(values);
    for (size_t i = 0; i < values; ++i)
      out.hidden[i] = loadElement(bytes.data(), i, hidden_->dtype);
  }
  return out;
}

} // namespace kiln::rt
