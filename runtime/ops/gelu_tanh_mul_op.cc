// GeluTanhMul (plan.fbs): y = gelu_tanh(gu[:, :I]) * gu[:, I:] (GeGLU: Gemma's MLP activation).
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
  out.Set(schema::GeluTanhMulParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (v.in[0]->rows() != v.out[0]->rows() || widthOf(v.in[0]) != 2 * widthOf(v.out[0]))
    return shapeError("gu(rows, 2*I) -> y(rows, I) widths/rows do not agree");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::geluTanhMul({op.inputs[0].data, y.data, rowsOf(y, c), widthOf(y), elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const AttentionScratch &) {
  return {launchWith(
      kc::GeluTanhMulParams{op.inputs[0].data, op.outputs[0].data, rowsOf(op.outputs[0], c)})};
}

} // namespace

const OpEntry &geluTanhMulOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::GeluTanhMulParams;
    e.name = "gelu_tanh_mul";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"gelu_tanh_mul",
                         "elementwise.cuh",
                         "GeluTanhMulParams",
                         "geluTanhMul",
                         {"dtype", "intermediate", "threads"},
                         KernelGrid::kRowChunks,
                         "intermediate"}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      const std::string dtype = kernelDType(k.output(0).dtype);
      const auto width = static_cast<int64_t>(widthOf(k.output(0)));
      return std::vector<KernelInstance>{makeKernelInstance(
          "gelu_tanh_mul", {{"dtype", dtype},
                            {"intermediate", str(width)},
                            {"threads", str(threadsFor(vectorsPerRow(width, dtype), 256))}})};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
