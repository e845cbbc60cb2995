// SiluMul (plan.fbs): y = silu(gu[:, :I]) * gu[:, I:] (the gated MLP's activation). GeluTanhMul
// (gelu_tanh_mul_op.cc) is built from the same parts: gatedMulEntry.
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
  out.Set(schema::SiluMulParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (v.in[0]->rows() != v.out[0]->rows() || widthOf(v.in[0]) != 2 * widthOf(v.out[0]))
    return shapeError("gu(rows, 2*I) -> y(rows, I) widths/rows do not agree");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::siluMul({op.inputs[0].data, y.data, rowsOf(y, c), widthOf(y), elemType(y)});
}

// Both gated activations launch with SiluMulParams.
std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  return {launchWith(
      kc::SiluMulParams{op.inputs[0].data, op.outputs[0].data, rowsOf(op.outputs[0], c)})};
}

const char *templateOf(const schema::OpT &op) {
  return op.params.type == schema::OpParams::GeluTanhMulParams ? "gelu_tanh_mul" : "silu_mul";
}

Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const std::string dtype = kernelDType(k.output(0).dtype);
  const auto width = static_cast<int64_t>(widthOf(k.output(0)));
  return std::vector<KernelInstance>{makeKernelInstance(
      templateOf(k.op), {{"dtype", dtype},
                         {"intermediate", str(width)},
                         {"threads", str(threadsFor(vectorsPerRow(width, dtype), 256))}})};
}

} // namespace

OpEntry gatedMulEntry(schema::OpParams kind, const char *name, const char *kernelFunction,
                      Status (*packParams)(const OpParamValues &, schema::OpParamsUnion &),
                      CpuOpFn cpu) {
  OpEntry e;
  e.kind = kind;
  e.name = name;
  e.arity = &arity;
  e.packParams = packParams;
  e.checkShapes = &checkShapes;
  e.runCpu = cpu;
  e.cuda.templates = {{name,
                       "elementwise.cuh",
                       "SiluMulParams",
                       kernelFunction,
                       {"dtype", "intermediate", "threads"},
                       KernelGrid::kRowChunks,
                       "intermediate"}};
  e.cuda.instances = &instances;
  e.cuda.launches = &launches;
  return e;
}

const OpEntry &siluMulOp() {
  static const OpEntry entry =
      gatedMulEntry(schema::OpParams::SiluMulParams, "silu_mul", "siluMul", &pack, &runCpu);
  return entry;
}

} // namespace kiln::rt::ops
