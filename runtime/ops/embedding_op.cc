// Embedding (plan.fbs): y[t] = table[token_ids[t] - vocab_start], zeros outside the table's rows.
// A quantized table (GGUF blocks kept packed) runs kernels/cuda/quant.cuh's embeddingQuant on GPUs.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"
#include "runtime/ops/quant_sections.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {2, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::EmbeddingParamsT params;
  if (values.has("vocab_start")) {
    KILN_ASSIGN_OR_RETURN(params.vocab_start, values.u32("vocab_start"));
  }
  if (values.has("scale")) {
    KILN_ASSIGN_OR_RETURN(params.scale, values.f32("scale"));
  }
  out.Set(std::move(params));
  return okStatus();
}

// One rank holds the whole table (vocab_start 0); with tp ranks each holds a vocab shard, and the
// shards together must be able to cover the vocabulary.
Status checkRange(const schema::Plan &plan, const schema::Op &op, uint64_t rows) {
  uint64_t vocab = plan.model()->vocab_size();
  uint64_t start = op.params_as_EmbeddingParams()->vocab_start();
  uint64_t tp = std::max<uint64_t>(plan.tp(), 1);
  if (tp == 1 && start != 0)
    return shapeError("vocab_start is " + std::to_string(start) +
                      "; a tp 1 plan holds the whole table");
  if (start >= vocab)
    return shapeError("vocab_start " + std::to_string(start) + " is not below vocab_size " +
                      std::to_string(vocab));
  if (rows < (vocab + tp - 1) / tp)
    return shapeError("table has " + std::to_string(rows) + " rows, fewer than vocab_size " +
                      std::to_string(vocab) + (tp > 1 ? " / tp " + std::to_string(tp) : ""));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const schema::Buffer *table = v.in[1], *y = v.out[0];
  // Token ids (or shifted ones: an encoder-decoder's decoder input), positions (learned position
  // embeddings) or token types (an encoder's segments).
  if (!(isStepInput(v.in[0], schema::StepInputKind::TokenIds) ||
        isStepInput(v.in[0], schema::StepInputKind::ShiftedTokenIds) ||
        isStepInput(v.in[0], schema::StepInputKind::Positions) ||
        isStepInput(v.in[0], schema::StepInputKind::TokenTypeIds)) ||
      table->kind() != schema::BufferKind::Weight || table->shape()->size() != 2 ||
      y->rows() != schema::RowScale::Tokens || widthOf(y) != table->shape()->Get(1))
    return shapeError("needs [token_ids, positions or token_type_ids step input, table weight "
                      "[rows, hidden]] -> y(Tokens, hidden)");
  if (isStepInput(v.in[0], schema::StepInputKind::Positions)) {
    const uint64_t positions = v.plan.limits()->max_seq_len();
    if (table->shape()->Get(0) < positions || v.op.params_as_EmbeddingParams()->vocab_start() != 0)
      return shapeError("a position table needs a row for each of max_seq_len " +
                        std::to_string(positions) + " positions and vocab_start 0");
    return okStatus();
  }
  if (isStepInput(v.in[0], schema::StepInputKind::TokenTypeIds)) {
    const uint32_t types = v.plan.model()->type_vocab_size();
    if (table->shape()->Get(0) != types || v.op.params_as_EmbeddingParams()->vocab_start() != 0)
      return shapeError("a token type table needs one row for each of model.type_vocab_size " +
                        std::to_string(types) + " types and vocab_start 0");
    return okStatus();
  }
  return checkRange(v.plan, v.op, table->shape()->Get(0));
}

// checkPlan keeps vocab_start below the model's vocab_size, which fits int32.
int32_t vocabStartOf(const BoundOp &op) {
  const auto *params = op.op->params_as_EmbeddingParams();
  return params ? static_cast<int32_t>(params->vocab_start()) : 0;
}

float scaleOf(const BoundOp &op) {
  const auto *params = op.op->params_as_EmbeddingParams();
  return params ? params->scale() : 1.0f;
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &table = op.inputs[1];
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::embedding({i32(op.inputs[0]), c.numTokens, table.data, elemType(table),
                           static_cast<int32_t>(table.fixedRows), widthOf(table), y.data,
                           vocabStartOf(op), elemType(y), quantOf(table), scaleOf(op)});
}

// A float table: `embedding`; a quantized one: `embedding_quant`, a thread per run of 32 values.
Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const std::string dtype = kernelDType(k.output(0).dtype);
  const int64_t hidden = static_cast<int64_t>(widthOf(k.output(0)));
  if (isQuantDType(k.input(1).dtype)) {
    std::map<std::string, std::string> constants = quantKernelConstants(k.input(1));
    constants["dtype"] = dtype;
    constants["hidden"] = str(hidden);
    constants["threads"] = str(threadsFor(hidden / kc::kQuantRun, 256));
    return std::vector<KernelInstance>{makeKernelInstance("embedding_quant", std::move(constants))};
  }
  return std::vector<KernelInstance>{makeKernelInstance(
      "embedding", {{"dtype", dtype},
                    {"weight_dtype", kernelDType(k.input(1).dtype)},
                    {"hidden", str(hidden)},
                    {"threads", str(threadsFor(vectorsPerRow(hidden, dtype), 256))}})};
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const BoundBuffer &table = op.inputs[1];
  kc::EmbeddingParams params{
      i32(op.inputs[0]), table.data,       op.outputs[0].data,
      c.numTokens,       vocabStartOf(op), static_cast<int32_t>(table.fixedRows),
      nullptr,           nullptr,          scaleOf(op)};
  if (isQuantDType(table.dtype)) {
    const kc::QuantSections sections = quantSectionsOf(table);
    params.scales = sections.scales;
    params.mins = sections.mins;
  }
  return {launchWith(params)};
}

// The token ids and one table row per token read, y written.
OpCost cost(const OpCostInputs &in) {
  OpCost cost;
  const BoundBuffer &table = in.input(1);
  cost.weightBytes = static_cast<uint64_t>(in.counts.numTokens) * rowBytes(table);
  cost.bytesRead = stepBytes(in.input(0), in.counts) + cost.weightBytes;
  cost.bytesWritten = stepBytes(in.output(0), in.counts);
  return cost;
}

} // namespace

const OpEntry &embeddingOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::EmbeddingParams;
    e.name = "embedding";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.matrixWeightInputs = 1u << 1;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"embedding",
                         "elementwise.cuh",
                         "EmbeddingParams",
                         "embedding",
                         {"dtype", "weight_dtype", "hidden", "threads"},
                         KernelGrid::kRowChunksMixed,
                         "hidden"},
                        {"embedding_quant",
                         "quant.cuh",
                         "EmbeddingParams",
                         "embeddingQuant",
                         {"dtype", "hidden", "format", "group", "threads"},
                         KernelGrid::kRowCta}};
    e.cuda.kernelsPerOp = 1; // of either template: a float or a quantized table
    e.cuda.instances = &instances;
    e.cuda.launches = &launches;
    e.cost = &cost;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
