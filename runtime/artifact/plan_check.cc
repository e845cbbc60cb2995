// Semantic checks of a verified plan. The FlatBuffers verifier only proves the buffer is
// well-formed; these checks prove that every index, size and width the executor and kernels will
// trust is consistent with plan.fbs, so a bad plan fails at load with a message instead of
// reading out of bounds at run time.
#include "runtime/artifact/artifact.h"
#include "runtime/artifact/kv_layout.h"

#include "runtime/ops/op_table.h"
#include "schema/version.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::rt {

namespace {

using schema::BufferKind;
using schema::RowScale;
using schema::StepInputKind;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

// The FlatBuffers verifier checks a vector's 4-byte length, not that 8-byte elements are 8-byte
// aligned, so a crafted plan.kiln can place a shape 4 bytes off; reading it would be a misaligned
// load (undefined behaviour; found by tests/fuzz/artifact_fuzz, docs/reliability.md). The plan is
// mmapped, so its start is page-aligned and the check is on the address.
bool elementsAligned(const flatbuffers::Vector<uint64_t> *v) {
  return !v || reinterpret_cast<uintptr_t>(v->Data()) % alignof(uint64_t) == 0;
}

// Product of `dims` times `scale`, or kMaxU64 on overflow.
uint64_t checkedProduct(const flatbuffers::Vector<uint64_t> *dims, size_t first, uint64_t scale) {
  uint64_t product = scale;
  for (size_t i = first; dims && i < dims->size(); ++i) {
    uint64_t d = dims->Get(i);
    if (d != 0 && product > kMaxU64 / d)
      return kMaxU64;
    product *= d;
  }
  return product;
}

RowScale expectedRows(StepInputKind kind) {
  switch (kind) {
  case StepInputKind::QueryStartLoc:
  case StepInputKind::ContextLens:
  case StepInputKind::BlockTables:
  case StepInputKind::SequenceLengths:
    return RowScale::Sequences;
  case StepInputKind::LogitsIndices:
    return RowScale::Logits;
  default:
    return RowScale::Tokens;
  }
}

std::string str(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

class PlanChecker {
public:
  PlanChecker(const schema::Plan &plan, const std::string &file) : plan_(plan), file_(file) {}

  Status check();

private:
  Status checkHeader();
  Status checkKvScales(const schema::KvCacheSpec &kv, const char *field,
                       const flatbuffers::Vector<float> *scales);
  Status checkCollectivesMatch();
  Status checkRank(const schema::Rank &rank);
  Status checkActivationDtypes(const schema::Rank &rank);
  Status checkWeights(const schema::Rank &rank);
  Status checkBuffer(const schema::Rank &rank, uint32_t index);
  Status checkOp(const schema::Rank &rank, uint32_t index);
  uint64_t maxRows(const schema::Buffer &buffer) const;
  Status error(const std::string &what) const { return dataLoss(file_ + ": " + where_ + what); }

  const schema::Plan &plan_;
  std::string file_;
  std::string where_; // "rank 0 op 3 'layers.0.qkv' (Linear): "
  const schema::Rank *rank_ = nullptr;
};

Status PlanChecker::check() {
  KILN_RETURN_IF_ERROR(checkHeader());
  for (uint32_t r = 0; r < plan_.ranks()->size(); ++r) {
    rank_ = plan_.ranks()->Get(r);
    where_ = "rank " + std::to_string(r) + ": ";
    if (rank_->rank() != r)
      return error("records rank " + std::to_string(rank_->rank()) + " at position " +
                   std::to_string(r));
    KILN_RETURN_IF_ERROR(checkRank(*rank_));
  }
  where_.clear();
  return checkCollectivesMatch();
}

// The ranks meet at every collective: a rank whose program holds another sequence of collectives
// would leave its partners waiting (until the communicator's timeout) on every step.
Status PlanChecker::checkCollectivesMatch() {
  auto collectives = [](const schema::Rank &rank) {
    std::vector<schema::OpParams> kinds;
    for (const schema::Op *op : *rank.program())
      if (const OpEntry *entry = findOp(op->params_type()); entry && entry->collective)
        kinds.push_back(op->params_type());
    return kinds;
  };
  std::vector<schema::OpParams> first = collectives(*plan_.ranks()->Get(0));
  for (uint32_t r = 1; r < plan_.ranks()->size(); ++r)
    if (collectives(*plan_.ranks()->Get(r)) != first)
      return error("rank " + std::to_string(r) +
                   "'s program has another sequence of collectives (AllReduce/AllGather) than "
                   "rank 0's: the ranks would wait on each other forever");
  return okStatus();
}

Status PlanChecker::checkHeader() {
  if (!plan_.model() || !plan_.limits() || !plan_.kv_cache())
    return error("missing model, limits or kv_cache table");
  if (!plan_.ranks() || plan_.ranks()->size() == 0)
    return error("the plan has no ranks");
  if (plan_.tp() != plan_.ranks()->size())
    return error("tp is " + std::to_string(plan_.tp()) + " but the plan has " +
                 std::to_string(plan_.ranks()->size()) + " rank(s)");
  if (plan_.model()->vocab_size() == 0)
    return error("model.vocab_size is 0");
  const schema::CompiledLimits &l = *plan_.limits();
  const schema::KvCacheSpec &kv = *plan_.kv_cache();
  if (l.max_batch() == 0 || l.max_seq_len() == 0 || l.max_tokens_per_step() == 0 ||
      l.max_blocks_per_seq() == 0)
    return error("a compiled limit (max_batch, max_seq_len, max_tokens_per_step, "
                 "max_blocks_per_seq) is 0");
  if (l.max_logits_per_step() != 0 && (l.max_logits_per_step() < l.max_batch() ||
                                       l.max_logits_per_step() > l.max_tokens_per_step()))
    return error("max_logits_per_step " + std::to_string(l.max_logits_per_step()) +
                 " is outside [max_batch, max_tokens_per_step]");
  if (kv.num_layers() == 0 || kv.num_kv_heads() == 0 || kv.head_dim() == 0 ||
      kv.block_size() == 0 || dtypeSize(kv.dtype()) == 0)
    return error("kv_cache spec has a zero field or an unknown dtype");
  if (Result<KvLayout> layout = kvLayoutOf(kv); !layout.isOk())
    return error(layout.status().message());
  if (!isKvCacheDType(kv.dtype()))
    return error("kv_cache.dtype is " + dtypeName(kv.dtype()) +
                 "; it must be F32, F16, BF16 or F8E4M3");
  if (!isFloatDType(plan_.activation_dtype()))
    return error("activation_dtype is " + dtypeName(plan_.activation_dtype()) +
                 "; it must be F32, F16 or BF16");
  KILN_RETURN_IF_ERROR(checkKvScales(kv, "k_scales", kv.k_scales()));
  KILN_RETURN_IF_ERROR(checkKvScales(kv, "v_scales", kv.v_scales()));
  if (uint64_t(l.max_blocks_per_seq()) * kv.block_size() < l.max_seq_len())
    return error("limits.max_blocks_per_seq " + std::to_string(l.max_blocks_per_seq()) +
                 " x kv block_size " + std::to_string(kv.block_size()) +
                 " does not cover max_seq_len " + std::to_string(l.max_seq_len()));
  return okStatus();
}

// kv_cache.k_scales / v_scales (plan.fbs KvCacheSpec): none, or one finite positive scale per
// layer of an F8E4M3 cache.
Status PlanChecker::checkKvScales(const schema::KvCacheSpec &kv, const char *field,
                                  const flatbuffers::Vector<float> *scales) {
  if (!scales || scales->size() == 0)
    return okStatus();
  const std::string name = std::string("kv_cache.") + field;
  if (kv.dtype() != schema::DType::F8E4M3)
    return error(name + " is set for a " + dtypeName(kv.dtype()) +
                 " cache; scales apply only to an F8E4M3 cache");
  if (scales->size() != kv.num_layers())
    return error(name + " holds " + std::to_string(scales->size()) + " values; the cache has " +
                 std::to_string(kv.num_layers()) + " layers");
  for (uint32_t l = 0; l < scales->size(); ++l)
    if (!(std::isfinite(scales->Get(l)) && scales->Get(l) > 0.0f))
      return error(name + "[" + std::to_string(l) + "] is " + std::to_string(scales->Get(l)) +
                   "; a scale must be finite and positive");
  return okStatus();
}

Status PlanChecker::checkRank(const schema::Rank &rank) {
  std::string weightsFile = str(rank.weights_file());
  if (weightsFile.empty() || weightsFile.find('/') != std::string::npos || weightsFile == ".." ||
      weightsFile == ".")
    return error("weights_file '" + weightsFile + "' must be a file name inside the artifact");
  KILN_RETURN_IF_ERROR(checkWeights(rank));
  if (!rank.buffers() || !rank.program())
    return error("missing buffers or program");
  for (uint32_t b = 0; b < rank.buffers()->size(); ++b)
    KILN_RETURN_IF_ERROR(checkBuffer(rank, b));
  for (uint32_t o = 0; o < rank.program()->size(); ++o)
    KILN_RETURN_IF_ERROR(checkOp(rank, o));
  if (rank.logits() >= rank.buffers()->size())
    return error("logits buffer " + std::to_string(rank.logits()) + " is out of range (" +
                 std::to_string(rank.buffers()->size()) + " buffers)");
  const schema::Buffer &logits = *rank.buffers()->Get(rank.logits());
  const bool hidden = plan_.output() == schema::PlanOutput::HiddenStates;
  const uint64_t width = hidden ? plan_.model()->hidden_size() : plan_.model()->vocab_size();
  if (logits.kind() != BufferKind::Activation || logits.rows() != RowScale::Logits ||
      checkedProduct(logits.shape(), 1, 1) != width)
    return error("output buffer " + std::to_string(rank.logits()) + " '" + str(logits.name()) +
                 "' must be an activation of [Logits rows, " +
                 (hidden ? "hidden_size " : "vocab_size ") + std::to_string(width) + "]");
  return checkActivationDtypes(rank);
}

// plan.fbs "dtype": every activation is stored in activation_dtype except the logits (and what
// leads to them through a Softcap (Gemma 2) or, at tp > 1, the AllGather of the lm_head shards),
// which are F32 for sampling.
Status PlanChecker::checkActivationDtypes(const schema::Rank &rank) {
  std::vector<bool> logitsPath(rank.buffers()->size(), false);
  logitsPath[rank.logits()] = true;
  for (auto it = rank.program()->rbegin(); it != rank.program()->rend(); ++it) {
    const schema::Op *op = *it;
    const bool passesLogits = op->params_type() == schema::OpParams::AllGatherParams ||
                              op->params_type() == schema::OpParams::SoftcapParams;
    if (passesLogits && logitsPath[op->outputs()->Get(0)])
      logitsPath[op->inputs()->Get(0)] = true;
  }
  const schema::DType activations = plan_.activation_dtype();
  for (uint32_t i = 0; i < rank.buffers()->size(); ++i) {
    const schema::Buffer &b = *rank.buffers()->Get(i);
    if (b.kind() != BufferKind::Activation)
      continue;
    std::string name = "buffer " + std::to_string(i) + " '" + str(b.name()) + "'";
    if (logitsPath[i] && b.dtype() != schema::DType::F32)
      return error(name + " holds logits but has dtype " + dtypeName(b.dtype()) +
                   "; logits are F32 whatever activation_dtype is");
    if (!logitsPath[i] && b.dtype() != activations)
      return error(name + " has dtype " + dtypeName(b.dtype()) +
                   " but the plan's activation_dtype "
                   "is " +
                   dtypeName(activations) +
                   "; every activation but the logits is "
                   "stored in activation_dtype");
  }
  return okStatus();
}

Status PlanChecker::checkWeights(const schema::Rank &rank) {
  if (!rank.weights())
    return okStatus();
  const std::string weightsFile = str(rank.weights_file());
  for (uint32_t w = 0; w < rank.weights()->size(); ++w) {
    const schema::WeightEntry &e = *rank.weights()->Get(w);
    std::string name = "weight " + std::to_string(w) + " '" + str(e.name()) + "'";
    if ((dtypeSize(e.dtype()) == 0 && !isQuantDType(e.dtype())) || !e.shape())
      return error(name + ": unknown dtype " + dtypeName(e.dtype()) + " or missing shape");
    if (!elementsAligned(e.shape()))
      return error(name + ": shape is not 8-byte aligned: the plan is corrupted");
    const WeightSize expected =
        weightSize(e.dtype(), {e.shape()->data(), e.shape()->size()}, e.group_size());
    if (!expected.error.empty())
      return error(name + ": " + expected.error);
    if (e.size() != expected.bytes)
      return error(name + ": size " + std::to_string(e.size()) + " bytes != " +
                   dtypeName(e.dtype()) + " size of its shape = " + std::to_string(expected.bytes));
    if (e.offset() % kWeightAlignment != 0)
      return error(name + ": offset " + std::to_string(e.offset()) + " is not " +
                   std::to_string(kWeightAlignment) + "-byte aligned");
    if (e.offset() > rank.weights_file_size() || e.size() > rank.weights_file_size() - e.offset())
      return error(name + ": bytes [" + std::to_string(e.offset()) + ", +" +
                   std::to_string(e.size()) + ") lie outside " + weightsFile + " (" +
                   std::to_string(rank.weights_file_size()) + " bytes)");
    if (!e.sha256() || e.sha256()->size() != 64)
      return error(name + ": sha256 must be 64 lower-case hex digits");
  }
  return okStatus();
}

uint64_t PlanChecker::maxRows(const schema::Buffer &buffer) const {
  const schema::CompiledLimits &l = *plan_.limits();
  switch (buffer.rows()) {
  case RowScale::Fixed:
    return buffer.shape()->Get(0);
  case RowScale::Tokens:
    return l.max_tokens_per_step();
  case RowScale::Sequences:
    return l.max_batch() + (buffer.step_input() == StepInputKind::QueryStartLoc ? 1 : 0);
  case RowScale::Logits: // 0 in plans written before the field: every token's logits
    return l.max_logits_per_step() ? l.max_logits_per_step() : l.max_tokens_per_step();
  }
  return kMaxU64;
}

Status PlanChecker::checkBuffer(const schema::Rank &rank, uint32_t index) {
  const schema::Buffer &b = *rank.buffers()->Get(index);
  std::string name = "buffer " + std::to_string(index) + " '" + str(b.name()) + "'";
  const bool quantized = b.kind() == BufferKind::Weight && isQuantDType(b.dtype());
  if (!b.shape() || b.shape()->size() == 0 || (dtypeSize(b.dtype()) == 0 && !quantized) ||
      b.rows() > RowScale::MAX || b.kind() > BufferKind::MAX)
    return error(name + ": missing shape, or unknown dtype, kind or rows rule");
  if (!elementsAligned(b.shape()))
    return error(name + ": shape is not 8-byte aligned: the plan is corrupted");
  if (b.rows() != RowScale::Fixed && b.shape()->Get(0) < maxRows(b))
    return error(name + ": shape[0] " + std::to_string(b.shape()->Get(0)) +
                 " is below the compiled maximum row count " + std::to_string(maxRows(b)));
  uint64_t bytes = checkedProduct(b.shape(), 0, dtypeSize(b.dtype()));
  switch (b.kind()) {
  case BufferKind::Weight: {
    uint32_t numWeights = rank.weights() ? rank.weights()->size() : 0;
    if (b.weight() < 0 || uint32_t(b.weight()) >= numWeights)
      return error(name + ": weight index " + std::to_string(b.weight()) + " is out of range (" +
                   std::to_string(numWeights) + " weights)");
    const schema::WeightEntry &e = *rank.weights()->Get(b.weight());
    bool sameShape = e.shape()->size() == b.shape()->size();
    for (uint32_t i = 0; sameShape && i < b.shape()->size(); ++i)
      sameShape = e.shape()->Get(i) == b.shape()->Get(i);
    if (e.dtype() != b.dtype() || e.group_size() != b.group_size() || !sameShape ||
        b.rows() != RowScale::Fixed)
      return error(name + ": dtype/group_size/shape differ from weight '" + str(e.name()) +
                   "' or rows is not Fixed");
    return okStatus();
  }
  case BufferKind::Activation:
    if (b.size_bytes() < bytes)
      return error(name + ": size_bytes " + std::to_string(b.size_bytes()) +
                   " is below dtype size x shape = " + std::to_string(bytes));
    if (b.arena_offset() > rank.arena_bytes() ||
        b.size_bytes() > rank.arena_bytes() - b.arena_offset())
      return error(name + ": activation [" + std::to_string(b.arena_offset()) + ", +" +
                   std::to_string(b.size_bytes()) + ") lies beyond the arena (arena_bytes " +
                   std::to_string(rank.arena_bytes()) + ")");
    return okStatus();
  case BufferKind::StepInput:
    if (b.step_input() == StepInputKind::None || b.step_input() > StepInputKind::MAX ||
        b.dtype() != schema::DType::I32 || b.size_bytes() < bytes)
      return error(name + ": a step input needs a known step_input kind, dtype I32 and "
                          "size_bytes >= its shape");
    if (b.rows() != expectedRows(b.step_input()))
      return error(name + ": step input " + schema::EnumNameStepInputKind(b.step_input()) +
                   " must have rows rule " +
                   schema::EnumNameRowScale(expectedRows(b.step_input())));
    if (b.kv_group() != 0 && b.step_input() != StepInputKind::BlockTables &&
        b.step_input() != StepInputKind::SlotMapping)
      return error(name + ": only BlockTables and SlotMapping step inputs have a kv_group");
    if (const auto *groups = plan_.kv_cache()->groups();
        b.kv_group() != 0 && (!groups || b.kv_group() >= groups->size()))
      return error(name + ": kv_group " + std::to_string(b.kv_group()) +
                   " is not a group of kv_cache.groups");
    if (b.step_input() == StepInputKind::ShiftedTokenIds &&
        (plan_.model()->decoder_start_token_id() < 0 ||
         uint32_t(plan_.model()->decoder_start_token_id()) >= plan_.model()->vocab_size()))
      return error(name + ": shifted token ids need model.decoder_start_token_id in [0, "
                          "vocab_size)");
    if (b.step_input() == StepInputKind::TokenTypeIds && plan_.model()->type_vocab_size() < 2)
      return error(name + ": token type ids need model.type_vocab_size >= 2, not " +
                   std::to_string(plan_.model()->type_vocab_size()));
    if (b.step_input() == StepInputKind::BlockTables &&
        (b.shape()->size() != 2 || b.shape()->Get(1) != plan_.limits()->max_blocks_per_seq()))
      return error(name + ": block tables must be [max_batch, max_blocks_per_seq " +
                   std::to_string(plan_.limits()->max_blocks_per_seq()) + "]");
    return okStatus();
  }
  return okStatus();
}

Status PlanChecker::checkOp(const schema::Rank &rank, uint32_t index) {
  const schema::Op &op = *rank.program()->Get(index);
  std::string rankWhere = where_;
  where_ += "op " + std::to_string(index) + " '" + str(op.name()) + "' (" +
            opKindName(op.params_type()) + "): ";
  const OpEntry *entry = findOp(op.params_type());
  if (!entry || !op.params())
    return error("unknown op kind or missing params");
  OpArity arity = entry->arity(op);
  uint32_t numIn = op.inputs() ? op.inputs()->size() : 0;
  uint32_t numOut = op.outputs() ? op.outputs()->size() : 0;
  if (numIn != arity.inputs || numOut != arity.outputs)
    return error("has " + std::to_string(numIn) + " inputs and " + std::to_string(numOut) +
                 " outputs; this op kind requires " + std::to_string(arity.inputs) + " and " +
                 std::to_string(arity.outputs));
  std::vector<const schema::Buffer *> in, out;
  for (uint32_t i = 0; i < numIn + numOut; ++i) {
    bool isIn = i < numIn;
    uint32_t b = isIn ? op.inputs()->Get(i) : op.outputs()->Get(i - numIn);
    std::string role =
        std::string(isIn ? "input " : "output ") + std::to_string(isIn ? i : i - numIn);
    if (b >= rank.buffers()->size())
      return error(role + " refers to buffer " + std::to_string(b) + ", out of range (" +
                   std::to_string(rank.buffers()->size()) + " buffers)");
    const schema::Buffer *buffer = rank.buffers()->Get(b);
    if (!isIn && (buffer->kind() != BufferKind::Activation || buffer->rows() == RowScale::Fixed))
      return error(role + " (buffer " + std::to_string(b) + " '" + str(buffer->name()) +
                   "') must be an activation whose rows scale with the step");
    (isIn ? in : out).push_back(buffer);
  }
  if (entry->inPlaceInput >= 0 &&
      op.outputs()->Get(0) != op.inputs()->Get(static_cast<uint32_t>(entry->inPlaceInput)))
    return error("output 0 must be input " + std::to_string(entry->inPlaceInput) +
                 ", updated in place");
  Status shapes = entry->checkShapes(PlanOpView{plan_, op, in, out});
  if (!shapes.isOk())
    return error(shapes.message());
  where_ = rankWhere;
  return okStatus();
}

} // namespace

Status checkPlan(const schema::Plan &plan, const std::string &file) {
  return PlanChecker(plan, file).check();
}

} // namespace kiln::rt
