// RmsNorm (plan.fbs): y = x / sqrt(mean(x^2) + eps) * w.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {2, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::RmsNormParamsT params;
  KILN_ASSIGN_OR_RETURN(params.eps, values.f32("eps"));
  out.Set(std::move(params));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || elementsOf(v.in[1]) != widthOf(v.out[0]))
    return shapeError("x, w and y widths/rows differ");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kernels::cpu::rmsNorm({x.data, f32(op.inputs[1]), op.outputs[0].data, rowsOf(x, c), widthOf(x),
                         op.op->params_as_RmsNormParams()->eps(), elemType(x)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const auto &in = op.inputs;
  return {launchWith(kc::RmsNormParams{in[0].data, in[1].data, op.outputs[0].data, rowsOf(in[0], c),
                                       op.op->params_as_RmsNormParams()->eps()})};
}

} // namespace

// One CTA per row, up to 1024 threads over the row's 16-byte vectors. `weightInput` holds w.
KernelInstance normInstance(const char *op, const KernelPlanContext &k, size_t weightInput) {
  const std::string dtype = kernelDType(k.output(0).dtype);
  const int64_t hidden = static_cast<int64_t>(widthOf(k.output(0)));
  return makeKernelInstance(op, {{"dtype", dtype},
                                 {"weight_dtype", kernelDType(k.input(weightInput).dtype)},
                                 {"hidden", str(hidden)},
                                 {"threads", str(threadsFor(vectorsPerRow(hidden, dtype), 1024))}});
}

const OpEntry &rmsNormOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::RmsNormParams;
    e.name = "rms_norm";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"rms_norm",
                         "norm.cuh",
                         "RmsNormParams",
                         "rmsNorm",
                         {"dtype", "weight_dtype", "hidden", "threads"}}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{normInstance("rms_norm", k, 1)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
