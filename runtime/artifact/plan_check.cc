// Semantic checks of a verified plan. The FlatBuffers verifier only proves the buffer is
// well-formed; these checks prove that every index, size and width the executor and kernels will
// trust is consistent with plan.fbs, so a bad plan fails at load with a message instead of
// reading out of bounds at run time.
#include "runtime/artifact/artifact.h"

#include "schema/version.h"

#include <algorithm>
#include <limits>

namespace kiln::rt {

size_t dtypeSize(schema::DType dtype) {
  switch (dtype) {
  case schema::DType::F32:
    return 4;
  case schema::DType::F16:
    return 2;
  case schema::DType::BF16:
    return 2;
  case schema::DType::I32:
    return 4;
  case schema::DType::I64:
    return 8;
  case schema::DType::U8:
    return 1;
  }
  return 0;
}

std::string dtypeName(schema::DType dtype) {
  if (dtypeSize(dtype) == 0)
    return "DType(" + std::to_string(static_cast<int>(dtype)) + ")";
  return schema::EnumNameDType(dtype);
}

std::string opKindName(schema::OpParams kind) {
  if (kind == schema::OpParams::NONE || kind > schema::OpParams::MAX)
    return "OpParams(" + std::to_string(static_cast<int>(kind)) + ")";
  std::string name = schema::EnumNameOpParams(kind);
  return name.substr(0, name.size() - 6); // drop "Params"
}

namespace {

using schema::BufferKind;
using schema::RowScale;
using schema::StepInputKind;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

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
    return RowScale::Sequences;
  case StepInputKind::LogitsIndices:
    return RowScale::Logits;
  default:
    return RowScale::Tokens;
  }
}

bool isFloatDType(schema::DType dtype) {
  return dtype == schema::DType::F32 || dtype == schema::DType::F16 || dtype == schema::DType::BF16;
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
  Status checkCollectivesMatch();
  Status checkRank(const schema::Rank &rank);
  Status checkActivationDtypes(const schema::Rank &rank);
  Status checkWeights(const schema::Rank &rank);
  Status checkBuffer(const schema::Rank &rank, uint32_t index);
  Status checkOp(const schema::Rank &rank, uint32_t index);
  Status checkRowOpShapes(const schema::Op &op, const std::vector<const schema::Buffer *> &in,
                          const std::vector<const schema::Buffer *> &out);
  Status checkEmbeddingRange(const schema::Op &op, uint64_t rows);
  Status checkStepOpShapes(const schema::Op &op, const std::vector<const schema::Buffer *> &in,
                           const std::vector<const schema::Buffer *> &out);
  Status checkHeads(uint32_t layer, uint32_t heads, uint32_t kvHeads, uint32_t headDim);
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
      if (op->params_type() == schema::OpParams::AllReduceParams ||
          op->params_type() == schema::OpParams::AllGatherParams)
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
  if (kv.num_layers() == 0 || kv.num_kv_heads() == 0 || kv.head_dim() == 0 ||
      kv.block_size() == 0 || dtypeSize(kv.dtype()) == 0)
    return error("kv_cache spec has a zero field or an unknown dtype");
  if (!isFloatDType(kv.dtype()))
    return error("kv_cache.dtype is " + dtypeName(kv.dtype()) + "; it must be F32, F16 or BF16");
  if (!isFloatDType(plan_.activation_dtype()))
    return error("activation_dtype is " + dtypeName(plan_.activation_dtype()) +
                 "; it must be F32, F16 or BF16");
  if (uint64_t(l.max_blocks_per_seq()) * kv.block_size() < l.max_seq_len())
    return error("limits.max_blocks_per_seq " + std::to_string(l.max_blocks_per_seq()) +
                 " x kv block_size " + std::to_string(kv.block_size()) +
                 " does not cover max_seq_len " + std::to_string(l.max_seq_len()));
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
  if (logits.kind() != BufferKind::Activation || logits.rows() != RowScale::Logits ||
      checkedProduct(logits.shape(), 1, 1) != plan_.model()->vocab_size())
    return error("logits buffer " + std::to_string(rank.logits()) + " '" + str(logits.name()) +
                 "' must be an activation of [Logits rows, vocab_size " +
                 std::to_string(plan_.model()->vocab_size()) + "]");
  return checkActivationDtypes(rank);
}

// plan.fbs "dtype": every activation is stored in activation_dtype except the logits (and, at
// tp > 1, the lm_head shard their AllGather gathers), which are F32 for sampling.
Status PlanChecker::checkActivationDtypes(const schema::Rank &rank) {
  std::vector<bool> logitsPath(rank.buffers()->size(), false);
  logitsPath[rank.logits()] = true;
  for (const schema::Op *op : *rank.program())
    if (op->params_type() == schema::OpParams::AllGatherParams &&
        op->outputs()->Get(0) == rank.logits())
      logitsPath[op->inputs()->Get(0)] = true;
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
    if (dtypeSize(e.dtype()) == 0 || !e.shape())
      return error(name + ": unknown dtype " + dtypeName(e.dtype()) + " or missing shape");
    uint64_t expected = checkedProduct(e.shape(), 0, dtypeSize(e.dtype()));
    if (e.size() != expected)
      return error(name + ": size " + std::to_string(e.size()) + " bytes != " +
                   dtypeName(e.dtype()) + " size x shape = " + std::to_string(expected));
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
  case RowScale::Logits:
    return l.max_tokens_per_step();
  }
  return kMaxU64;
}

Status PlanChecker::checkBuffer(const schema::Rank &rank, uint32_t index) {
  const schema::Buffer &b = *rank.buffers()->Get(index);
  std::string name = "buffer " + std::to_string(index) + " '" + str(b.name()) + "'";
  if (!b.shape() || b.shape()->size() == 0 || dtypeSize(b.dtype()) == 0 ||
      b.rows() > RowScale::MAX || b.kind() > BufferKind::MAX)
    return error(name + ": missing shape, or unknown dtype, kind or rows rule");
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
    if (e.dtype() != b.dtype() || !sameShape || b.rows() != RowScale::Fixed)
      return error(name + ": dtype/shape differ from weight '" + str(e.name()) +
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
    if (b.step_input() == StepInputKind::BlockTables &&
        (b.shape()->size() != 2 || b.shape()->Get(1) != plan_.limits()->max_blocks_per_seq()))
      return error(name + ": block tables must be [max_batch, max_blocks_per_seq " +
                   std::to_string(plan_.limits()->max_blocks_per_seq()) + "]");
    return okStatus();
  }
  return okStatus();
}

uint64_t widthOf(const schema::Buffer *b) {
  return checkedProduct(b->shape(), 1, 1);
}
uint64_t elementsOf(const schema::Buffer *b) {
  return checkedProduct(b->shape(), 0, 1);
}
bool isStepInput(const schema::Buffer *b, StepInputKind kind) {
  return b->kind() == BufferKind::StepInput && b->step_input() == kind;
}

struct Arity {
  uint32_t inputs = 0;
  uint32_t outputs = 0;
};

// Input/output counts per op kind (plan.fbs header); Linear's depends on has_bias.
Arity arityOf(const schema::Op &op) {
  using K = schema::OpParams;
  switch (op.params_type()) {
  case K::EmbeddingParams:
    return {2, 1};
  case K::RmsNormParams:
    return {2, 1};
  case K::AddRmsNormParams:
    return {3, 2};
  case K::LinearParams:
    return {op.params_as_LinearParams()->has_bias() ? 3u : 2u, 1};
  case K::RopeKvWriteParams:
    return {4, 1};
  case K::AttentionParams:
    return {5, 1};
  case K::SiluMulParams:
    return {1, 1};
  case K::AddParams:
    return {2, 1};
  case K::GatherRowsParams:
    return {2, 1};
  case K::AllReduceParams:
  case K::AllGatherParams:
    return {1, 1};
  default:
    return {};
  }
}

Status PlanChecker::checkOp(const schema::Rank &rank, uint32_t index) {
  const schema::Op &op = *rank.program()->Get(index);
  std::string rankWhere = where_;
  where_ += "op " + std::to_string(index) + " '" + str(op.name()) + "' (" +
            opKindName(op.params_type()) + "): ";
  if (op.params_type() == schema::OpParams::NONE || op.params_type() > schema::OpParams::MAX ||
      !op.params())
    return error("unknown op kind or missing params");
  Arity arity = arityOf(op);
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
  if (op.params_type() == schema::OpParams::AddRmsNormParams &&
      op.outputs()->Get(0) != op.inputs()->Get(1))
    return error("output 0 must be the residual (input 1), updated in place");
  KILN_RETURN_IF_ERROR(checkRowOpShapes(op, in, out));
  where_ = rankWhere;
  return okStatus();
}

Status PlanChecker::checkHeads(uint32_t layer, uint32_t heads, uint32_t kvHeads, uint32_t headDim) {
  const schema::KvCacheSpec &kv = *plan_.kv_cache();
  if (layer >= kv.num_layers())
    return error("layer " + std::to_string(layer) + " >= kv_cache.num_layers " +
                 std::to_string(kv.num_layers()));
  if (kvHeads != kv.num_kv_heads() || headDim != kv.head_dim())
    return error("num_kv_heads/head_dim " + std::to_string(kvHeads) + "/" +
                 std::to_string(headDim) + " differ from kv_cache " +
                 std::to_string(kv.num_kv_heads()) + "/" + std::to_string(kv.head_dim()));
  if (heads == 0 || heads % kvHeads != 0)
    return error("num_heads " + std::to_string(heads) + " is not a multiple of num_kv_heads " +
                 std::to_string(kvHeads));
  return okStatus();
}

// Ops that map rows to rows: widths must agree and rows follow the same rule.
Status PlanChecker::checkRowOpShapes(const schema::Op &op,
                                     const std::vector<const schema::Buffer *> &in,
                                     const std::vector<const schema::Buffer *> &out) {
  using K = schema::OpParams;
  auto width = widthOf;
  auto all = elementsOf;
  auto bad = [&](const std::string &what) { return error(what); };
  const schema::Buffer *y = out[0];
  switch (op.params_type()) {
  case K::RmsNormParams:
    if (in[0]->rows() != y->rows() || width(in[0]) != width(y) || all(in[1]) != width(y))
      return bad("x, w and y widths/rows differ");
    return okStatus();
  case K::AddRmsNormParams:
    if (in[0]->rows() != in[1]->rows() || in[0]->rows() != out[1]->rows() ||
        width(in[0]) != width(in[1]) || width(in[0]) != width(out[1]) || all(in[2]) != width(in[0]))
      return bad("x, residual, w and y widths/rows differ");
    return okStatus();
  case K::LinearParams:
    if (in[1]->shape()->size() != 2 || width(in[0]) != in[1]->shape()->Get(1) ||
        width(y) != in[1]->shape()->Get(0) || in[0]->rows() != y->rows() ||
        (in.size() == 3 && all(in[2]) != width(y)))
      return bad("x(rows, in), W[out, in], bias[out], y(rows, out) do not agree");
    return okStatus();
  case K::SiluMulParams:
    if (in[0]->rows() != y->rows() || width(in[0]) != 2 * width(y))
      return bad("gu(rows, 2*I) -> y(rows, I) widths/rows do not agree");
    return okStatus();
  case K::AddParams:
    if (in[0]->rows() != y->rows() || in[1]->rows() != y->rows() || width(in[0]) != width(y) ||
        width(in[1]) != width(y))
      return bad("a, b and y widths/rows differ");
    return okStatus();
  case K::AllReduceParams:
    if (in[0]->rows() != y->rows() || width(in[0]) != width(y) || in[0]->dtype() != y->dtype())
      return bad("x and y rows/widths/dtypes differ");
    return okStatus();
  case K::AllGatherParams: {
    uint64_t n = width(in[0]), m = width(y), tp = plan_.tp();
    if (in[0]->rows() != y->rows() || in[0]->dtype() != y->dtype() || m > tp * n ||
        m <= (tp - 1) * n)
      return bad("x(rows, n) -> y(rows, m) needs equal rows and (tp-1)*n < m <= tp*n (tp " +
                 std::to_string(tp) + ", n " + std::to_string(n) + ", m " + std::to_string(m) +
                 ")");
    return okStatus();
  }
  default:
    return checkStepOpShapes(op, in, out);
  }
}

// One rank holds the whole table (vocab_start 0); with tp ranks each holds a vocab shard, and the
// shards together must be able to cover the vocabulary.
Status PlanChecker::checkEmbeddingRange(const schema::Op &op, uint64_t rows) {
  uint64_t vocab = plan_.model()->vocab_size();
  uint64_t start = op.params_as_EmbeddingParams()->vocab_start();
  uint64_t tp = std::max<uint64_t>(plan_.tp(), 1);
  if (tp == 1 && start != 0)
    return error("vocab_start is " + std::to_string(start) + "; a tp 1 plan holds the whole table");
  if (start >= vocab)
    return error("vocab_start " + std::to_string(start) + " is not below vocab_size " +
                 std::to_string(vocab));
  if (rows < (vocab + tp - 1) / tp)
    return error("table has " + std::to_string(rows) + " rows, fewer than vocab_size " +
                 std::to_string(vocab) + (tp > 1 ? " / tp " + std::to_string(tp) : ""));
  return okStatus();
}

// Ops that read step inputs or the KV cache.
Status PlanChecker::checkStepOpShapes(const schema::Op &op,
                                      const std::vector<const schema::Buffer *> &in,
                                      const std::vector<const schema::Buffer *> &out) {
  using K = schema::OpParams;
  auto width = widthOf;
  auto all = elementsOf;
  auto is = isStepInput;
  auto bad = [&](const std::string &what) { return error(what); };
  const schema::Buffer *y = out[0];
  switch (op.params_type()) {
  case K::EmbeddingParams:
    if (!is(in[0], StepInputKind::TokenIds) || in[1]->kind() != BufferKind::Weight ||
        in[1]->shape()->size() != 2 || y->rows() != RowScale::Tokens ||
        width(y) != in[1]->shape()->Get(1))
      return bad("needs [token_ids step input, table weight [vocab, hidden]] -> y(Tokens, hidden)");
    return checkEmbeddingRange(op, in[1]->shape()->Get(0));
  case K::RopeKvWriteParams: {
    const auto *p = op.params_as_RopeKvWriteParams();
    KILN_RETURN_IF_ERROR(checkHeads(p->layer(), p->num_heads(), p->num_kv_heads(), p->head_dim()));
    uint64_t h = p->num_heads(), kv = p->num_kv_heads(), d = p->head_dim();
    if (p->rotary_dim() == 0 || p->rotary_dim() % 2 != 0 || p->rotary_dim() > d)
      return bad("rotary_dim " + std::to_string(p->rotary_dim()) +
                 " must be even and in (0, head_dim]");
    if (in[0]->rows() != RowScale::Tokens || width(in[0]) != (h + 2 * kv) * d ||
        !is(in[1], StepInputKind::Positions) || !is(in[2], StepInputKind::SlotMapping) ||
        all(in[3]) != p->rotary_dim() / 2 || y->rows() != RowScale::Tokens || width(y) != h * d)
      return bad("needs [qkv(Tokens,(H+2KV)*D), positions, slot_mapping, inv_freq[rotary_dim/2]] "
                 "-> q(Tokens, H*D)");
    return okStatus();
  }
  case K::AttentionParams: {
    const auto *p = op.params_as_AttentionParams();
    KILN_RETURN_IF_ERROR(checkHeads(p->layer(), p->num_heads(), p->num_kv_heads(), p->head_dim()));
    uint64_t hd = uint64_t(p->num_heads()) * p->head_dim();
    if (in[0]->rows() != RowScale::Tokens || width(in[0]) != hd ||
        !is(in[1], StepInputKind::Positions) || !is(in[2], StepInputKind::QueryStartLoc) ||
        !is(in[3], StepInputKind::ContextLens) || !is(in[4], StepInputKind::BlockTables) ||
        y->rows() != RowScale::Tokens || width(y) != hd)
      return bad("needs [q(Tokens,H*D), positions, query_start_loc, context_lens, block_tables] "
                 "-> o(Tokens, H*D)");
    return okStatus();
  }
  case K::GatherRowsParams:
    if (in[0]->rows() != RowScale::Tokens || !is(in[1], StepInputKind::LogitsIndices) ||
        y->rows() != RowScale::Logits || width(in[0]) != width(y))
      return bad("needs [x(Tokens, n), logits_indices] -> y(Logits, n)");
    return okStatus();
  default:
    return bad("unknown op kind");
  }
}

} // namespace

Status checkPlan(const schema::Plan &plan, const std::string &file) {
  return PlanChecker(plan, file).check();
}

} // namespace kiln::rt
