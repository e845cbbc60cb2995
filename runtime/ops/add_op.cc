// Add (plan.fbs): y = a + b (the residual stream where no norm follows to fuse with).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {2, 1};
}

Status pack(const OpParamValues &, schema::OpParamsUnion &out) {
  out.Set(schema::AddParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || !sameRowsAndWidth(v.in[1], v.out[0]))
    return shapeError("a, b and y widths/rows differ");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::add(
      {op.inputs[0].data, op.inputs[1].data, y.data, rowsOf(y, c) * y.width, elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  return {launchWith(kc::AddParams{op.inputs[0].data, op.inputs[1].data, op.outputs[0].data,
                                   rowsOf(op.outputs[0], c)})};
}

} // namespace

// One row of `width` elements per CTA row, cut into chunks of threads x 16-byte vectors.
KernelInstance rowChunkInstance(const char *op, const KernelPlanContext &k) {
  const std::string dtype = kernelDType(k.output(0).dtype);
  const auto width = static_cast<int64_t>(widthOf(k.output(0)));
  return makeKernelInstance(op, {{"dtype", dtype},
                                 {"width", str(width)},
                                 {"threads", str(threadsFor(vectorsPerRow(width, dtype), 256))}});
}

const OpEntry &addOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::AddParams;
    e.name = "add";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"add",
                         "elementwise.cuh",
                         "AddParams",
                         "add",
                         {"dtype", "width", "threads"},
                         KernelGrid::kRowChunks,
                         "width"}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{rowChunkInstance("add", k)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
