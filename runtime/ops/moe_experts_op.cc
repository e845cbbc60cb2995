// MoeExperts (plan.fbs): a mixture-of-experts MLP over the router's logits (Mixtral, Qwen3-MoE).
// CUDA: kernels/cuda/moe.cuh, one CTA per row reading only its experts' weights (correctness
// first: no grouped GEMM for prefill yet), for layers whose row, activations and sums fit the
// CTA's static shared memory.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

// The CUDA kernel keeps 2 * hidden + intermediate floats in static shared memory.
constexpr uint64_t kMaxSharedFloats = 40 * 1024 / 4;

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
  kernels::cpu::moeExperts(
      {op.inputs[0].data, op.inputs[1].data, op.inputs[2].data, op.inputs[3].data,
       elemType(op.inputs[2]), y.data, rowsOf(y, c), widthOf(y),
       static_cast<int32_t>(p->intermediate()), static_cast<int32_t>(p->num_experts()),
       static_cast<int32_t>(p->top_k()), p->renormalize(), elemType(y), op.cpuPackedWeights});
}

size_t cpuPackedBytes(const BoundOp &op) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  return kernels::cpu::moePackedWeightBytes(
      elemType(op.inputs[2]), static_cast<int32_t>(p->num_experts()),
      static_cast<int32_t>(widthOf(op.inputs[2])), static_cast<int32_t>(p->intermediate()));
}

// The stored experts are not read once packed: their pages go back.
std::vector<std::span<const uint8_t>> packCpuWeights(const BoundOp &op, void *packed) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const BoundBuffer &gateUp = op.inputs[2], &down = op.inputs[3];
  kernels::cpu::packMoeWeights(
      gateUp.data, down.data, elemType(gateUp), static_cast<int32_t>(p->num_experts()),
      static_cast<int32_t>(widthOf(gateUp)), static_cast<int32_t>(p->intermediate()), packed);
  auto stored = [](const BoundBuffer &w) {
    return std::span<const uint8_t>(static_cast<const uint8_t *>(w.data),
                                    size_t(w.fixedRows) * w.width * dtypeSize(w.dtype));
  };
  return {stored(gateUp), stored(down)};
}

Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const schema::MoeExpertsParamsT &p = *k.op.params.AsMoeExpertsParams();
  const uint64_t hidden = widthOf(k.output(0));
  if (2 * hidden + p.intermediate > kMaxSharedFloats)
    return unimplemented("moe_experts on CUDA keeps 2 x hidden + intermediate floats in shared "
                         "memory, at most " +
                         std::to_string(kMaxSharedFloats) + "; this model's are " +
                         std::to_string(2 * hidden + p.intermediate) + " (hidden " +
                         std::to_string(hidden) + ", intermediate " +
                         std::to_string(p.intermediate) + "); compile for --device cpu");
  return std::vector<KernelInstance>{
      makeKernelInstance("moe_experts", {{"dtype", kernelDType(k.output(0).dtype)},
                                         {"weight_dtype", kernelDType(k.input(2).dtype)},
                                         {"hidden", str(hidden)},
                                         {"intermediate", str(p.intermediate)},
                                         {"experts", str(p.num_experts)},
                                         {"top_k", str(p.top_k)},
                                         {"threads", "256"}})};
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const AttentionScratch &) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  return {launchWith(kc::MoeExpertsParams{op.inputs[0].data, op.inputs[1].data, op.inputs[2].data,
                                          op.inputs[3].data, op.outputs[0].data,
                                          rowsOf(op.outputs[0], c), p->renormalize() ? 1 : 0})};
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
    e.cpuPackedBytes = &cpuPackedBytes;
    e.packCpuWeights = &packCpuWeights;
    e.cuda.templates = {
        {"moe_experts",
         "moe.cuh",
         "MoeExpertsParams",
         "MoeExpertsRow",
         {"dtype", "weight_dtype", "hidden", "intermediate", "experts", "top_k", "threads"},
         KernelGrid::kRowCta}};
    e.cuda.instances = &instances;
    e.cuda.launches = &launches;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
