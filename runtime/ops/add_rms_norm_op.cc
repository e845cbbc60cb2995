// AddRmsNorm (plan.fbs): residual += x (in place: outputs[0] == inputs[1]);
// y = RmsNorm(residual) * w.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {3, 2};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::AddRmsNormParamsT params;
  KILN_ASSIGN_OR_RETURN(params.eps, values.f32("eps"));
  out.Set(std::move(params));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const schema::Buffer *x = v.in[0];
  if (!sameRowsAndWidth(x, v.in[1]) || !sameRowsAndWidth(x, v.out[1]) ||
      elementsOf(v.in[2]) != widthOf(x))
    return shapeError("x, residual, w and y widths/rows differ");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kernels::cpu::addRmsNorm({x.data, op.inputs[1].data, f32(op.inputs[2]), op.outputs[1].data,
                            rowsOf(x, c), widthOf(x), op.op->params_as_AddRmsNormParams()->eps(),
                            elemType(x)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const auto &in = op.inputs;
  return {launchWith(kc::AddRmsNormParams{in[0].data, in[1].data, in[2].data, op.outputs[1].data,
                                          rowsOf(in[0], c),
                                          op.op->params_as_AddRmsNormParams()->eps()})};
}

} // namespace

const OpEntry &addRmsNormOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::AddRmsNormParams;
    e.name = "add_rms_norm";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.inPlaceInput = 1;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"add_rms_norm",
                         "norm.cuh",
                         "AddRmsNormParams",
                         "addRmsNorm",
                         {"dtype", "weight_dtype", "hidden", "threads"}}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{normInstance("add_rms_norm", k, 2)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
