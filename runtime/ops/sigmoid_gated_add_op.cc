// SigmoidGatedAdd (plan.fbs): y = a + sigmoid(x . w) * b per row (Qwen2-MoE's shared expert: a the
// routed experts' output, b the shared expert's, w the shared_expert_gate row).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {4, 1};
}

Status pack(const OpParamValues &, schema::OpParamsUnion &out) {
  out.Set(schema::SigmoidGatedAddParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  for (size_t i = 0; i < 3; ++i)
    if (!sameRowsAndWidth(v.in[i], v.out[0]) || v.in[i]->dtype() != v.out[0]->dtype())
      return shapeError("a, b and x must have y's rows, width and dtype");
  if (elementsOf(v.in[3]) != widthOf(v.out[0]) || v.in[3]->dtype() != schema::DType::F32)
    return shapeError("w must be F32 [1, n] with n y's width");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const auto &in = op.inputs;
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::sigmoidGatedAdd({in[0].data, in[1].data, in[2].data, f32(in[3]), y.data,
                                 rowsOf(y, c), widthOf(y), elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const auto &in = op.inputs;
  return {launchWith(kc::SigmoidGatedAddParams{in[0].data, in[1].data, in[2].data, in[3].data,
                                               op.outputs[0].data, rowsOf(op.outputs[0], c)})};
}

} // namespace

const OpEntry &sigmoidGatedAddOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::SigmoidGatedAddParams;
    e.name = "sigmoid_gated_add";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"sigmoid_gated_add",
                         "norm.cuh",
                         "SigmoidGatedAddParams",
                         "sigmoidGatedAdd",
                         {"dtype", "weight_dtype", "hidden", "threads"}}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{normInstance("sigmoid_gated_add", k, 3)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
