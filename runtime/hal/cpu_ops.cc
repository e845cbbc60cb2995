// The cpu backend's dispatch: each op's entry in the op table (runtime/ops/op_table.h) holds the
// function that binds its schema params and bound buffers to its kernel in kernels/cpu. Functions
// are chosen once per op at prepare time, so a step costs one indirect call per op.
#include "runtime/hal/cpu_device.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/plan_types.h"

#include <optional>

namespace kiln::rt {
namespace {

using schema::DType;

// The cpu kernels take F32, F16 or BF16 activations and KV cache and compute in fp32. One op's
// activations share one dtype, except the outputs of an op whose entry says they may differ (the
// lm_head Linear writes F32 logits from half activations). Of the weights only the inputs the
// entry marks (embedding table, Linear W) may be half or quantized; norm weights, biases and
// inv_freq are F32.
Status checkCpuBuffer(const OpEntry &entry, const BoundOp &op, const BoundBuffer &b, bool isIn,
                      size_t index, std::optional<DType> &activation) {
  std::string role = (isIn ? "input " : "output ") + std::to_string(index);
  auto refuse = [&](const std::string &why) {
    return unimplemented("cpu backend: " + opLabel(*op.op) + ": " + role + " has dtype " +
                         dtypeName(b.dtype) + "; " + why);
  };
  if (b.kind == schema::BufferKind::StepInput)
    return b.dtype == DType::I32 ? okStatus() : refuse("step inputs are I32");
  if (b.kind == schema::BufferKind::Weight) {
    bool matrix = isIn && index < 32 && (entry.matrixWeightInputs >> index & 1u);
    if (matrix ? isFloatDType(b.dtype) || isQuantDType(b.dtype) : b.dtype == DType::F32)
      return okStatus();
    return refuse(matrix ? "weight matrices are F32, F16, BF16, Q8, Q4, Q4M, Q4Z, Q8F or Q8F32"
                         : "norm weights, biases and inv_freq are read as F32");
  }
  if (!isFloatDType(b.dtype))
    return refuse("the cpu kernels take F32, F16 or BF16 activations");
  if (!isIn && entry.outputDtypeMayDiffer)
    return okStatus();
  if (activation && *activation != b.dtype)
    return refuse("the op's other activations are " + dtypeName(*activation) +
                  " (one op's activations share one dtype; only a Linear's output may differ)");
  activation = b.dtype;
  return okStatus();
}

Status checkCpuDtypes(const OpEntry &entry, const BoundOp &op) {
  std::optional<DType> activation;
  for (size_t i = 0; i < op.inputs.size(); ++i)
    KILN_RETURN_IF_ERROR(checkCpuBuffer(entry, op, op.inputs[i], true, i, activation));
  for (size_t i = 0; i < op.outputs.size(); ++i)
    KILN_RETURN_IF_ERROR(checkCpuBuffer(entry, op, op.outputs[i], false, i, activation));
  if (!entry.kvLayer)
    return okStatus();
  if (!op.kvCache || !isKvCacheDType(op.kvCache->dtype))
    return unimplemented("cpu backend: " + opLabel(*op.op) +
                         ": needs an F32, F16, BF16 or F8E4M3 KV cache, the plan's is " +
                         (op.kvCache ? dtypeName(op.kvCache->dtype) : std::string("missing")));
  const uint32_t layer = entry.kvLayer(*op.op);
  if (layer >= op.kvCache->keys.size() || layer >= op.kvCache->values.size())
    return invalidArgument("cpu backend: " + opLabel(*op.op) + ": no KV cache bound for layer " +
                           std::to_string(layer));
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
    return invalidArgument("cpu backend: " + opLabel(*op.op) + ": bound " +
                           std::to_string(op.inputs.size()) + "/" +
                           std::to_string(op.outputs.size()) + " buffers, the op has " +
                           std::to_string(planIn) + "/" + std::to_string(planOut));
  const OpEntry *entry = findOp(op.op->params_type());
  if (!entry)
    return unimplemented("cpu backend: " + opLabel(*op.op) + " is not supported");
  // Collectives span ranks: the executor hands them to its Communicator, not to a device.
  if (entry->collective)
    return invalidArgument("cpu backend: " + opLabel(*op.op) +
                           " is a collective; the executor's communicator runs it");
  if (!entry->runCpu)
    return unimplemented("cpu backend: " + opLabel(*op.op) + " is not supported");
  KILN_RETURN_IF_ERROR(checkCpuDtypes(*entry, op));
  return entry->runCpu;
}

} // namespace kiln::rt
