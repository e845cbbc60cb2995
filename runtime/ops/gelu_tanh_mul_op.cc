// GeluTanhMul (plan.fbs): y = gelu_tanh(gu[:, :I]) * gu[:, I:] (GeGLU: Gemma's MLP activation),
// built as SiluMul is (silu_mul_op.cc gatedMulEntry).
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

Status pack(const OpParamValues &, schema::OpParamsUnion &out) {
  out.Set(schema::GeluTanhMulParamsT{});
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::geluTanhMul({op.inputs[0].data, y.data, rowsOf(y, c), widthOf(y), elemType(y)});
}

} // namespace

const OpEntry &geluTanhMulOp() {
  static const OpEntry entry = gatedMulEntry(schema::OpParams::GeluTanhMulParams, "gelu_tanh_mul",
                                             "geluTanhMul", &pack, &runCpu);
  return entry;
}

} // namespace kiln::rt::ops
