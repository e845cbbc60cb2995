// Gelu (plan.fbs): y = 0.5 x (1 + erf(x / sqrt(2))), transformers' exact "gelu" (encoders).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {1, 1};
}

Status pack(const OpParamValues &, schema::OpParamsUnion &out) {
  out.Set(schema::GeluParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || v.in[0]->dtype() != v.out[0]->dtype())
    return shapeError("x(rows, n) -> y(rows, n) of the same dtype");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::gelu({op.inputs[0].data, y.data, int64_t(rowsOf(y, c)) * widthOf(y), elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  return {
      launchWith(kc::GeluParams{op.inputs[0].data, op.outputs[0].data, rowsOf(op.outputs[0], c)})};
}

} // namespace

const OpEntry &geluOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::GeluParams;
    e.name = "gelu";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"gelu",
                         "elementwise.cuh",
                         "GeluParams",
                         "gelu",
                         {"dtype", "width", "threads"},
                         KernelGrid::kRowChunks,
                         "width"}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{rowChunkInstance("gelu", k)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
