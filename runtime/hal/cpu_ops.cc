// The cpu backend's dispatch table: one function per op kind, binding the op's schema params and
// bound buffers to the argument struct of its kernel in kernels/cpu. Functions are chosen once
// per op at prepare time, so a step costs one indirect call per op.
#include "runtime/artifact/artifact.h"
#include "runtime/hal/cpu_device.h"

#include "kernels/cpu/kernels.h"

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cpu;
using schema::DType;
using schema::OpParams;

float *f32(const BoundBuffer &b) {
  return static_cast<float *>(b.data);
}
const int32_t *i32(const BoundBuffer &b) {
  return static_cast<const int32_t *>(b.data);
}
int32_t rowsOf(const BoundBuffer &b, const StepCounts &c) {
  return static_cast<int32_t>(c.rows(b.rows, b.fixedRows));
}
int32_t widthOf(const BoundBuffer &b) {
  return static_cast<int32_t>(b.width);
}
kc::WeightType weightType(DType dtype) {
  return dtype == DType::BF16  ? kc::WeightType::kBF16
         : dtype == DType::F16 ? kc::WeightType::kF16
                               : kc::WeightType::kF32;
}

// checkPlan keeps vocab_start below the model's vocab_size, which fits int32.
int32_t vocabStartOf(const BoundOp &op) {
  const auto *params = op.op->params_as_EmbeddingParams();
  return params ? static_cast<int32_t>(params->vocab_start()) : 0;
}

void runEmbedding(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &table = op.inputs[1];
  kc::embedding({i32(op.inputs[0]), c.numTokens, table.data, weightType(table.dtype),
                 static_cast<int32_t>(table.fixedRows), widthOf(table), f32(op.outputs[0]),
                 vocabStartOf(op)});
}

void runRmsNorm(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kc::rmsNorm({f32(x), f32(op.inputs[1]), f32(op.outputs[0]), rowsOf(x, c), widthOf(x),
               op.op->params_as_RmsNormParams()->eps()});
}

void runAddRmsNorm(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kc::addRmsNorm({f32(x), f32(op.inputs[1]), f32(op.inputs[2]), f32(op.outputs[1]), rowsOf(x, c),
                  widthOf(x), op.op->params_as_AddRmsNormParams()->eps()});
}

void runLinear(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  const BoundBuffer &w = op.inputs[1];
  const float *bias = op.inputs.size() == 3 ? f32(op.inputs[2]) : nullptr;
  kc::linear({f32(x), w.data, weightType(w.dtype), bias, f32(op.outputs[0]), rowsOf(x, c),
              widthOf(w), static_cast<int32_t>(w.fixedRows)});
}

void runRopeKvWrite(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_RopeKvWriteParams();
  const KvCacheBinding &kv = *op.kvCache;
  kc::ropeKvWrite({f32(op.inputs[0]), i32(op.inputs[1]), i32(op.inputs[2]), f32(op.inputs[3]),
                   f32(op.outputs[0]), static_cast<float *>(kv.keys[p->layer()]),
                   static_cast<float *>(kv.values[p->layer()]), c.numTokens,
                   static_cast<int32_t>(p->num_heads()), static_cast<int32_t>(p->num_kv_heads()),
                   static_cast<int32_t>(p->head_dim()), static_cast<int32_t>(p->rotary_dim()),
                   kv.blockSize});
}

void runAttention(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_AttentionParams();
  const KvCacheBinding &kv = *op.kvCache;
  const BoundBuffer &blockTables = op.inputs[4];
  kc::attention(
      {f32(op.inputs[0]), i32(op.inputs[1]), i32(op.inputs[2]), i32(op.inputs[3]), i32(blockTables),
       widthOf(blockTables), static_cast<const float *>(kv.keys[p->layer()]),
       static_cast<const float *>(kv.values[p->layer()]), f32(op.outputs[0]), c.numSeqs,
       c.numTokens, static_cast<int32_t>(p->num_heads()), static_cast<int32_t>(p->num_kv_heads()),
       static_cast<int32_t>(p->head_dim()), kv.blockSize, p->scale()});
}

void runSiluMul(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::siluMul({f32(op.inputs[0]), f32(y), rowsOf(y, c), widthOf(y)});
}

void runAdd(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::add({f32(op.inputs[0]), f32(op.inputs[1]), f32(y), rowsOf(y, c) * y.width});
}

void runGatherRows(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::gatherRows({f32(op.inputs[0]), i32(op.inputs[1]), f32(y), c.numLogits, widthOf(y)});
}

std::string opLabel(const BoundOp &op) {
  return "op '" + (op.op->name() ? op.op->name()->str() : std::string()) + "' (" +
         opKindName(op.op->params_type()) + ")";
}

// The cpu kernels compute in fp32: activations, norm weights, biases and inv_freq are F32;
// only the big matrices (embedding table, Linear W) may be F16/BF16.
Status checkCpuDtypes(const BoundOp &op) {
  OpParams kind = op.op->params_type();
  for (size_t i = 0; i < op.inputs.size() + op.outputs.size(); ++i) {
    bool isIn = i < op.inputs.size();
    const BoundBuffer &b = isIn ? op.inputs[i] : op.outputs[i - op.inputs.size()];
    bool halfOk =
        isIn && i == 1 && (kind == OpParams::EmbeddingParams || kind == OpParams::LinearParams);
    bool ok = b.kind == schema::BufferKind::StepInput
                  ? b.dtype == DType::I32
                  : b.dtype == DType::F32 ||
                        (halfOk && (b.dtype == DType::F16 || b.dtype == DType::BF16));
    if (!ok)
      return unimplemented("cpu backend: " + opLabel(op) + ": " + (isIn ? "input " : "output ") +
                           std::to_string(isIn ? i : i - op.inputs.size()) + " has dtype " +
                           dtypeName(b.dtype) +
                           "; the cpu kernels take F32 activations (F16/BF16 only for weights)");
  }
  bool usesKv = kind == OpParams::RopeKvWriteParams || kind == OpParams::AttentionParams;
  if (usesKv && (!op.kvCache || op.kvCache->dtype != DType::F32))
    return unimplemented("cpu backend: " + opLabel(op) + ": needs an F32 KV cache, the plan's is " +
                         (op.kvCache ? dtypeName(op.kvCache->dtype) : std::string("missing")));
  return okStatus();
}

} // namespace

Result<CpuOpFn> selectCpuOp(const BoundOp &op) {
  if (!op.op)
    return invalidArgument("cpu backend: bound op has no plan op");
  // Arity and widths were checked against plan.fbs at load (checkPlan); a hand-made BoundOp
  // must still bind exactly the plan op's buffers.
  size_t planIn = op.op->inputs() ? op.op->inputs()->size() : 0;
  size_t planOut = op.op->outputs() ? op.op->outputs()->size() : 0;
  if (op.inputs.size() != planIn || op.outputs.size() != planOut)
    return invalidArgument("cpu backend: " + opLabel(op) + ": bound " +
                           std::to_string(op.inputs.size()) + "/" +
                           std::to_string(op.outputs.size()) + " buffers, the op has " +
                           std::to_string(planIn) + "/" + std::to_string(planOut));
  KILN_RETURN_IF_ERROR(checkCpuDtypes(op));
  switch (op.op->params_type()) {
  case OpParams::EmbeddingParams:
    return &runEmbedding;
  case OpParams::RmsNormParams:
    return &runRmsNorm;
  case OpParams::AddRmsNormParams:
    return &runAddRmsNorm;
  case OpParams::LinearParams:
    return &runLinear;
  case OpParams::RopeKvWriteParams:
    return &runRopeKvWrite;
  case OpParams::AttentionParams:
    return &runAttention;
  case OpParams::SiluMulParams:
    return &runSiluMul;
  case OpParams::AddParams:
    return &runAdd;
  case OpParams::GatherRowsParams:
    return &runGatherRows;
  case OpParams::AllReduceParams:
  case OpParams::AllGatherParams:
    // Collectives span ranks: the executor hands them to its Communicator, not to a device.
    return invalidArgument("cpu backend: " + opLabel(op) +
                           " is a collective; the executor's communicator runs it");
  default:
    return unimplemented("cpu backend: " + opLabel(op) + " is not supported");
  }
}

} // namespace kiln::rt
