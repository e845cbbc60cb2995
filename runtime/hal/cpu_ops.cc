// The cpu backend's dispatch table: one function per op kind, binding the op's schema params and
// bound buffers to the argument struct of its kernel in kernels/cpu. Functions are chosen once
// per op at prepare time, so a step costs one indirect call per op.
#include "runtime/artifact/artifact.h"
#include "runtime/hal/cpu_device.h"

#include "kernels/cpu/kernels.h"

#include <optional>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cpu;
using schema::DType;
using schema::OpParams;

const float *f32(const BoundBuffer &b) {
  return static_cast<const float *>(b.data);
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
// checkCpuDtypes admitted only F32/F16/BF16 where this is called.
kc::ElemType elemType(DType dtype) {
  return dtype == DType::BF16  ? kc::ElemType::kBF16
         : dtype == DType::F16 ? kc::ElemType::kF16
                               : kc::ElemType::kF32;
}
kc::ElemType elemType(const BoundBuffer &b) {
  return elemType(b.dtype);
}

// checkPlan keeps vocab_start below the model's vocab_size, which fits int32.
int32_t vocabStartOf(const BoundOp &op) {
  const auto *params = op.op->params_as_EmbeddingParams();
  return params ? static_cast<int32_t>(params->vocab_start()) : 0;
}

void runEmbedding(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &table = op.inputs[1];
  const BoundBuffer &y = op.outputs[0];
  kc::embedding({i32(op.inputs[0]), c.numTokens, table.data, elemType(table),
                 static_cast<int32_t>(table.fixedRows), widthOf(table), y.data, vocabStartOf(op),
                 elemType(y)});
}

void runRmsNorm(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kc::rmsNorm({x.data, f32(op.inputs[1]), op.outputs[0].data, rowsOf(x, c), widthOf(x),
               op.op->params_as_RmsNormParams()->eps(), elemType(x)});
}

void runAddRmsNorm(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kc::addRmsNorm({x.data, op.inputs[1].data, f32(op.inputs[2]), op.outputs[1].data, rowsOf(x, c),
                  widthOf(x), op.op->params_as_AddRmsNormParams()->eps(), elemType(x)});
}

void runLinear(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  const BoundBuffer &w = op.inputs[1];
  const BoundBuffer &y = op.outputs[0];
  const float *bias = op.inputs.size() == 3 ? f32(op.inputs[2]) : nullptr;
  kc::linear({x.data, w.data, elemType(w), bias, y.data, rowsOf(x, c), widthOf(w),
              static_cast<int32_t>(w.fixedRows), elemType(x), elemType(y)});
}

void runRopeKvWrite(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_RopeKvWriteParams();
  const KvCacheBinding &kv = *op.kvCache;
  kc::ropeKvWrite({op.inputs[0].data, i32(op.inputs[1]), i32(op.inputs[2]), f32(op.inputs[3]),
                   op.outputs[0].data, kv.keys[p->layer()], kv.values[p->layer()], c.numTokens,
                   static_cast<int32_t>(p->num_heads()), static_cast<int32_t>(p->num_kv_heads()),
                   static_cast<int32_t>(p->head_dim()), static_cast<int32_t>(p->rotary_dim()),
                   kv.blockSize, elemType(op.inputs[0]), elemType(kv.dtype)});
}

void runAttention(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_AttentionParams();
  const KvCacheBinding &kv = *op.kvCache;
  const BoundBuffer &blockTables = op.inputs[4];
  kc::attention({op.inputs[0].data, i32(op.inputs[1]), i32(op.inputs[2]), i32(op.inputs[3]),
                 i32(blockTables), widthOf(blockTables), kv.keys[p->layer()], kv.values[p->layer()],
                 op.outputs[0].data, c.numSeqs, c.numTokens, static_cast<int32_t>(p->num_heads()),
                 static_cast<int32_t>(p->num_kv_heads()), static_cast<int32_t>(p->head_dim()),
                 kv.blockSize, p->scale(), elemType(op.inputs[0]), elemType(kv.dtype)});
}

void runSiluMul(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::siluMul({op.inputs[0].data, y.data, rowsOf(y, c), widthOf(y), elemType(y)});
}

void runAdd(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::add({op.inputs[0].data, op.inputs[1].data, y.data, rowsOf(y, c) * y.width, elemType(y)});
}

void runGatherRows(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kc::gatherRows(
      {op.inputs[0].data, i32(op.inputs[1]), y.data, c.numLogits, widthOf(y), elemType(y)});
}

std::string opLabel(const BoundOp &op) {
  return "op '" + (op.op->name() ? op.op->name()->str() : std::string()) + "' (" +
         opKindName(op.op->params_type()) + ")";
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

// The cpu kernels take F32, F16 or BF16 activations and KV cache and compute in fp32. One op's
// activations share one dtype, except a Linear's output (the lm_head writes F32 logits from half
// activations). Of the weights only the big matrices (embedding table, Linear W) may be half;
// norm weights, biases and inv_freq are read as F32.
Status checkCpuBuffer(const BoundOp &op, const BoundBuffer &b, bool isIn, size_t index,
                      std::optional<DType> &activation) {
  OpParams kind = op.op->params_type();
  std::string role = (isIn ? "input " : "output ") + std::to_string(index);
  auto refuse = [&](const std::string &why) {
    return unimplemented("cpu backend: " + opLabel(op) + ": " + role + " has dtype " +
                         dtypeName(b.dtype) + "; " + why);
  };
  if (b.kind == schema::BufferKind::StepInput)
    return b.dtype == DType::I32 ? okStatus() : refuse("step inputs are I32");
  if (b.kind == schema::BufferKind::Weight) {
    bool matrix =
        isIn && index == 1 && (kind == OpParams::EmbeddingParams || kind == OpParams::LinearParams);
    if (matrix ? isFloat(b.dtype) : b.dtype == DType::F32)
      return okStatus();
    return refuse(matrix ? "weights are F32, F16 or BF16"
                         : "norm weights, biases and inv_freq are read as F32");
  }
  if (!isFloat(b.dtype))
    return refuse("the cpu kernels take F32, F16 or BF16 activations");
  if (!isIn && kind == OpParams::LinearParams)
    return okStatus();
  if (activation && *activation != b.dtype)
    return refuse("the op's other activations are " + dtypeName(*activation) +
                  " (one op's activations share one dtype; only a Linear's output may differ)");
  activation = b.dtype;
  return okStatus();
}

Status checkCpuDtypes(const BoundOp &op) {
  std::optional<DType> activation;
  for (size_t i = 0; i < op.inputs.size(); ++i)
    KILN_RETURN_IF_ERROR(checkCpuBuffer(op, op.inputs[i], true, i, activation));
  for (size_t i = 0; i < op.outputs.size(); ++i)
    KILN_RETURN_IF_ERROR(checkCpuBuffer(op, op.outputs[i], false, i, activation));
  OpParams kind = op.op->params_type();
  bool usesKv = kind == OpParams::RopeKvWriteParams || kind == OpParams::AttentionParams;
  if (usesKv && (!op.kvCache || !isFloat(op.kvCache->dtype)))
    return unimplemented("cpu backend: " + opLabel(op) +
                         ": needs an F32, F16 or BF16 KV cache, the plan's is " +
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
