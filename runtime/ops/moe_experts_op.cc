// MoeExperts (plan.fbs): a mixture-of-experts MLP over the router's logits (Mixtral, Qwen3-MoE).
// cpu only for now: a GPU compile refuses it naming the op.
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

OpArity arity(const schema::Op &) {
  return {4, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::MoeExpertsParamsT p;
  KILN_ASSIGN_OR_RETURN(p.num_experts, values.u32("num_experts"));
  KILN_ASSIGN_OR_RETURN(p.top_k, values.u32("top_k"));
  KILN_ASSIGN_OR_RETURN(p.intermediate, values.u32("intermediate"));
  KILN_ASSIGN_OR_RETURN(uint32_t renormalize, values.u32("renormalize"));
  p.renormalize = renormalize != 0;
  out.Set(std::move(p));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const auto *p = v.op.params_as_MoeExpertsParams();
  const uint64_t experts = p->num_experts(), inter = p->intermediate(), k = p->top_k();
  const uint64_t hidden = widthOf(v.in[0]);
  const schema::Buffer *gateUp = v.in[2], *down = v.in[3];
  if (experts == 0 || k == 0 || k > experts || inter == 0)
    return shapeError("num_experts, top_k and intermediate must be positive, top_k <= "
                      "num_experts");
  if (!sameRowsAndWidth(v.in[0], v.out[0]) || v.in[1]->rows() != v.in[0]->rows() ||
      widthOf(v.in[1]) != experts)
    return shapeError("needs [x(rows, H), router_logits(rows, num_experts)] -> y(rows, H)");
  for (const schema::Buffer *w : {gateUp, down})
    if (w->kind() != schema::BufferKind::Weight || w->shape()->size() != 2 ||
        isQuantDType(w->dtype()))
      return shapeError("expert weights must be F32, F16 or BF16 matrices");
  if (gateUp->shape()->Get(0) != experts * 2 * inter || gateUp->shape()->Get(1) != hidden ||
      down->shape()->Get(0) != experts * hidden || down->shape()->Get(1) != inter ||
      gateUp->dtype() != down->dtype())
    return shapeError("gate_up must be [num_experts * 2 * intermediate, H] and down "
                      "[num_experts * H, intermediate], of one dtype");
  return okStatus();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::moeExperts({op.inputs[0].data, op.inputs[1].data, op.inputs[2].data,
                            op.inputs[3].data, elemType(op.inputs[2]), y.data, rowsOf(y, c),
                            widthOf(y), static_cast<int32_t>(p->intermediate()),
                            static_cast<int32_t>(p->num_experts()),
                            static_cast<int32_t>(p->top_k()), p->renormalize(), elemType(y)});
}

} // namespace

const OpEntry &moeExpertsOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::MoeExpertsParams;
    e.name = "moe_experts";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.matrixWeightInputs = (1u << 2) | (1u << 3); // half experts; checkShapes refuses quantized
    e.runCpu = &runCpu;
    e.cuda.instances = [](const KernelPlanContext &) -> Result<std::vector<KernelInstance>> {
      return unimplemented("moe_experts (mixture-of-experts) has no CUDA kernel yet; compile "
                           "for --device cpu");
    };
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
