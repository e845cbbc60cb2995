// LayerNorm (plan.fbs): y = (x - mean) / sqrt(var + eps) * w + b (encoders: BERT, XLM-R).
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

OpArity arity(const schema::Op &) {
  return {3, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::LayerNormParamsT params;
  KILN_ASSIGN_OR_RETURN(params.eps, values.f32("eps"));
  out.Set(std::move(params));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || elementsOf(v.in[1]) != widthOf(v.out[0]) ||
      elementsOf(v.in[2]) != widthOf(v.out[0]) || v.in[1]->dtype() != schema::DType::F32 ||
      v.in[2]->dtype() != schema::DType::F32)
    return shapeError("needs [x(rows,n), w(F32,[n]), b(F32,[n])] -> y(rows,n)");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &x = op.inputs[0];
  kernels::cpu::layerNorm({x.data, f32(op.inputs[1]), f32(op.inputs[2]), op.outputs[0].data,
                           rowsOf(x, c), widthOf(x), op.op->params_as_LayerNormParams()->eps(),
                           elemType(x)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const auto &in = op.inputs;
  return {
      launchWith(kc::LayerNormParams{in[0].data, in[1].data, in[2].data, op.outputs[0].data,
                                     rowsOf(in[0], c), op.op->params_as_LayerNormParams()->eps()})};
}

} // namespace

const OpEntry &layerNormOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::LayerNormParams;
    e.name = "layer_norm";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"layer_norm",
                         "norm.cuh",
                         "LayerNormParams",
                         "layerNorm",
                         {"dtype", "weight_dtype", "hidden", "threads"}}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{normInstance("layer_norm", k, 1)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
