// Softcap (plan.fbs): y = tanh(x / cap) * cap (Gemma 2's final logit soft-capping).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {1, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::SoftcapParamsT p;
  KILN_ASSIGN_OR_RETURN(p.cap, values.f32("cap"));
  if (!(p.cap > 0.0f))
    return invalidArgument("softcap: cap must be positive, got " + std::to_string(p.cap));
  out.Set(std::move(p));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (v.in[0]->rows() != v.out[0]->rows() || widthOf(v.in[0]) != widthOf(v.out[0]) ||
      v.in[0]->dtype() != v.out[0]->dtype())
    return shapeError("x(rows, n) -> y(rows, n) of the same dtype");
  if (!(v.op.params_as_SoftcapParams()->cap() > 0.0f))
    return shapeError("cap must be positive");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::softcap({op.inputs[0].data, y.data, int64_t(rowsOf(y, c)) * widthOf(y),
                         op.op->params_as_SoftcapParams()->cap(), elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  return {
      launchWith(kc::SoftcapParams{op.inputs[0].data, op.outputs[0].data, rowsOf(op.outputs[0], c),
                                   op.op->params_as_SoftcapParams()->cap()})};
}

} // namespace

const OpEntry &softcapOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::SoftcapParams;
    e.name = "softcap";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"softcap",
                         "elementwise.cuh",
                         "SoftcapParams",
                         "softcap",
                         {"dtype", "width", "threads"},
                         KernelGrid::kRowChunks,
                         "width"}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{rowChunkInstance("softcap", k)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
