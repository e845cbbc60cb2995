// GatherRows (plan.fbs): y[i] = x[logits_indices[i]] (the rows whose logits the step returns).
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
  out.Set(schema::GatherRowsParamsT{});
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  if (v.in[0]->rows() != schema::RowScale::Tokens ||
      !isStepInput(v.in[1], schema::StepInputKind::LogitsIndices) ||
      v.out[0]->rows() != schema::RowScale::Logits || widthOf(v.in[0]) != widthOf(v.out[0]))
    return shapeError("needs [x(Tokens, n), logits_indices] -> y(Logits, n)");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::gatherRows(
      {op.inputs[0].data, i32(op.inputs[1]), y.data, c.numLogits, widthOf(y), elemType(y)});
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  return {launchWith(
      kc::GatherRowsParams{op.inputs[0].data, i32(op.inputs[1]), op.outputs[0].data, c.numLogits})};
}

} // namespace

const OpEntry &gatherRowsOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::GatherRowsParams;
    e.name = "gather_rows";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.runCpu = &runCpu;
    e.cuda.templates = {{"gather_rows",
                         "elementwise.cuh",
                         "GatherRowsParams",
                         "gatherRows",
                         {"dtype", "width", "threads"},
                         KernelGrid::kRowChunks,
                         "width"}};
    e.cuda.instances = [](const KernelPlanContext &k) -> Result<std::vector<KernelInstance>> {
      return std::vector<KernelInstance>{rowChunkInstance("gather_rows", k)};
    };
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
