// RopeKvWrite (plan.fbs): rotates q and k of the fused qkv rows, writes rotated k and raw v into
// the layer's paged KV cache at slot_mapping[t] and rotated q to the output.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::StepInputKind;

// [qkv, positions, slot_mapping, inv_freq, (query_start_loc, sequence_lengths), (q_norm, k_norm)]
constexpr uint32_t kSequenceInputs = 4; // query_start_loc, sequence_lengths
bool byLength(const schema::RopeKvWriteParams &p) {
  return p.mode() != schema::RopeMode::Static;
}
bool qkNorm(const schema::RopeKvWriteParams &p) {
  return p.qk_norm_eps() > 0.0f;
}
uint32_t qkNormInputs(const schema::RopeKvWriteParams &p) {
  return kSequenceInputs + (byLength(p) ? 2 : 0);
}

OpArity arity(const schema::Op &op) {
  const auto *p = op.params_as_RopeKvWriteParams();
  if (!p)
    return {4, 1};
  return {4u + (byLength(*p) ? 2u : 0u) + (qkNorm(*p) ? 2u : 0u), 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::RopeKvWriteParamsT p;
  KILN_ASSIGN_OR_RETURN(p.layer, values.u32("layer"));
  KILN_ASSIGN_OR_RETURN(p.num_heads, values.u32("num_heads"));
  KILN_ASSIGN_OR_RETURN(p.num_kv_heads, values.u32("num_kv_heads"));
  KILN_ASSIGN_OR_RETURN(p.head_dim, values.u32("head_dim"));
  KILN_ASSIGN_OR_RETURN(p.rotary_dim, values.u32("rotary_dim"));
  uint32_t mode = 0;
  if (values.has("rope_mode")) {
    KILN_ASSIGN_OR_RETURN(mode, values.u32("rope_mode"));
  }
  if (mode > static_cast<uint32_t>(schema::RopeMode::MAX))
    return invalidArgument("rope_mode " + std::to_string(mode) + " is not a plan.fbs RopeMode");
  p.mode = static_cast<schema::RopeMode>(mode);
  if (values.has("original_max_positions")) {
    KILN_ASSIGN_OR_RETURN(p.original_max_positions, values.u32("original_max_positions"));
  }
  if (values.has("rope_theta")) {
    KILN_ASSIGN_OR_RETURN(p.rope_theta, values.f32("rope_theta"));
  }
  if (values.has("dynamic_factor")) {
    KILN_ASSIGN_OR_RETURN(p.dynamic_factor, values.f64("dynamic_factor"));
  }
  if (values.has("attention_scaling")) {
    KILN_ASSIGN_OR_RETURN(p.attention_scaling, values.f32("attention_scaling"));
  }
  if (values.has("qk_norm_eps")) {
    KILN_ASSIGN_OR_RETURN(p.qk_norm_eps, values.f32("qk_norm_eps"));
  }
  const uint32_t expected = 4 + (mode != 0 ? 2 : 0) + (p.qk_norm_eps > 0.0f ? 2 : 0);
  if (values.numInputs != expected)
    return invalidArgument("has no plan op: the fusion passes (fuse-qkv, fuse-gate-up) must run "
                           "before emission (rope_kv_write reads " +
                           std::to_string(values.numInputs) + " operands; the plan op takes " +
                           std::to_string(expected) + ", one of them the fused qkv value)");
  out.Set(std::move(p));
  return okStatus();
}

Status checkModeInputs(const PlanOpView &v, const schema::RopeKvWriteParams &p) {
  const uint32_t tables = p.mode() == schema::RopeMode::LongShort ? 2 : 1;
  if (elementsOf(v.in[3]) != tables * (p.rotary_dim() / 2))
    return shapeError("inv_freq holds " + std::to_string(elementsOf(v.in[3])) + " values; mode " +
                      schema::EnumNameRopeMode(p.mode()) + " needs " + std::to_string(tables) +
                      " x rotary_dim / 2 (" + std::to_string(p.rotary_dim() / 2) + ")");
  if (byLength(p) && (!isStepInput(v.in[kSequenceInputs], StepInputKind::QueryStartLoc) ||
                      !isStepInput(v.in[kSequenceInputs + 1], StepInputKind::SequenceLengths) ||
                      p.original_max_positions() == 0))
    return shapeError("mode " + std::string(schema::EnumNameRopeMode(p.mode())) +
                      " needs inputs 4 and 5 to be the query_start_loc and sequence_lengths "
                      "step inputs and original_max_positions > 0");
  if (!(p.attention_scaling() > 0.0f))
    return shapeError("attention_scaling must be positive");
  if (qkNorm(p)) {
    const uint32_t at = qkNormInputs(p);
    if (elementsOf(v.in[at]) != p.head_dim() || elementsOf(v.in[at + 1]) != p.head_dim() ||
        v.in[at]->dtype() != schema::DType::F32 || v.in[at + 1]->dtype() != schema::DType::F32)
      return shapeError("q_norm and k_norm (inputs " + std::to_string(at) + " and " +
                        std::to_string(at + 1) + ") must be F32 [head_dim " +
                        std::to_string(p.head_dim()) + "]");
  }
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const auto *p = v.op.params_as_RopeKvWriteParams();
  KILN_RETURN_IF_ERROR(
      checkHeads(v.plan, p->layer(), p->num_heads(), p->num_kv_heads(), p->head_dim()));
  uint64_t h = p->num_heads(), kv = p->num_kv_heads(), d = p->head_dim();
  if (p->rotary_dim() == 0 || p->rotary_dim() % 2 != 0 || p->rotary_dim() > d)
    return shapeError("rotary_dim " + std::to_string(p->rotary_dim()) +
                      " must be even and in (0, head_dim]");
  const schema::Buffer *y = v.out[0];
  if (v.in[0]->rows() != schema::RowScale::Tokens || widthOf(v.in[0]) != (h + 2 * kv) * d ||
      !isStepInput(v.in[1], StepInputKind::Positions) ||
      !isStepInput(v.in[2], StepInputKind::SlotMapping) || y->rows() != schema::RowScale::Tokens ||
      widthOf(y) != h * d)
    return shapeError("needs [qkv(Tokens,(H+2KV)*D), positions, slot_mapping, inv_freq, ...] -> "
                      "q(Tokens, H*D)");
  KILN_RETURN_IF_ERROR(checkKvGroup(v.plan, p->layer(), v.in[2], -1));
  return checkModeInputs(v, *p);
}

uint32_t kvLayer(const schema::Op &op) {
  return op.params_as_RopeKvWriteParams()->layer();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_RopeKvWriteParams();
  const KvCacheBinding &kv = *op.kvCache;
  kernels::cpu::RopeKvWriteArgs args{op.inputs[0].data,
                                     i32(op.inputs[1]),
                                     i32(op.inputs[2]),
                                     f32(op.inputs[3]),
                                     op.outputs[0].data,
                                     kv.keys[p->layer()],
                                     kv.values[p->layer()],
                                     c.numTokens,
                                     static_cast<int32_t>(p->num_heads()),
                                     static_cast<int32_t>(p->num_kv_heads()),
                                     static_cast<int32_t>(p->head_dim()),
                                     static_cast<int32_t>(p->rotary_dim()),
                                     kv.blockSize,
                                     elemType(op.inputs[0]),
                                     elemType(kv.dtype)};
  args.mode = static_cast<kernels::cpu::RopeMode>(p->mode());
  if (byLength(*p)) {
    args.queryStartLoc = i32(op.inputs[kSequenceInputs]);
    args.sequenceLengths = i32(op.inputs[kSequenceInputs + 1]);
    args.numSeqs = c.numSeqs;
  }
  if (qkNorm(*p)) {
    args.qNorm = f32(op.inputs[qkNormInputs(*p)]);
    args.kNorm = f32(op.inputs[qkNormInputs(*p) + 1]);
    args.qkNormEps = p->qk_norm_eps();
  }
  args.originalMaxPositions = static_cast<int32_t>(p->original_max_positions());
  args.ropeTheta = p->rope_theta();
  args.dynamicFactor = p->dynamic_factor();
  args.attentionScaling = p->attention_scaling();
  args.kScale = kv.kScale(p->layer());
  args.vScale = kv.vScale(p->layer());
  kernels::cpu::ropeKvWrite(args);
}

Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const schema::RopeKvWriteParamsT &p = *k.op.params.AsRopeKvWriteParams();
  const int64_t heads = p.num_heads, kvHeads = p.num_kv_heads;
  return std::vector<KernelInstance>{makeKernelInstance(
      "rope_kv_write", {{"dtype", kernelDType(k.output(0).dtype)},
                        {"num_heads", str(heads)},
                        {"num_kv_heads", str(kvHeads)},
                        {"head_dim", str(p.head_dim)},
                        {"rotary_dim", str(p.rotary_dim)},
                        {"block_size", str(k.kvBlockSize)},
                        {"threads", str(threadsFor((heads + kvHeads) * (p.rotary_dim / 2), 256))},
                        {"kv_dtype", kernelDType(k.kvDtype)}})};
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &) {
  const auto *p = op.op->params_as_RopeKvWriteParams();
  const uint32_t layer = p->layer();
  const auto &in = op.inputs;
  kc::RopeKvWriteParams params{in[0].data,
                               i32(in[1]),
                               i32(in[2]),
                               f32(in[3]),
                               op.outputs[0].data,
                               op.kvCache->keys[layer],
                               op.kvCache->values[layer],
                               c.numTokens};
  params.mode = static_cast<int32_t>(p->mode());
  if (byLength(*p)) {
    params.queryStartLoc = i32(in[kSequenceInputs]);
    params.sequenceLengths = i32(in[kSequenceInputs + 1]);
    params.numSeqs = c.numSeqs;
  }
  if (qkNorm(*p)) {
    params.qNorm = f32(in[qkNormInputs(*p)]);
    params.kNorm = f32(in[qkNormInputs(*p) + 1]);
    params.qkNormEps = p->qk_norm_eps();
  }
  params.originalMaxPositions = static_cast<int32_t>(p->original_max_positions());
  params.ropeTheta = p->rope_theta();
  params.dynamicFactor = p->dynamic_factor();
  params.attentionScaling = p->attention_scaling();
  params.kScale = op.kvCache->kScale(layer);
  params.vScale = op.kvCache->vScale(layer);
  return {launchWith(params)};
}

// qkv, positions, slots, inv_freq read; q and each token's K and V written.
OpCost cost(const OpCostInputs &in) {
  OpCost cost = everyBufferCost(in);
  const auto *p = in.op.params_as_RopeKvWriteParams();
  cost.bytesWritten += static_cast<uint64_t>(in.counts.numTokens) *
                       kvTokenBytes(p->num_kv_heads(), p->head_dim(), in.kv);
  return cost;
}

} // namespace

const OpEntry &ropeKvWriteOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::RopeKvWriteParams;
    e.name = "rope_kv_write";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.kvLayer = &kvLayer;
    e.runCpu = &runCpu;
    KernelTemplate rope{"rope_kv_write",
                        "rope_kv.cuh",
                        "RopeKvWriteParams",
                        "ropeKvWrite",
                        {"dtype", "num_heads", "num_kv_heads", "head_dim", "rotary_dim",
                         "block_size", "threads", "kv_dtype"}};
    rope.fixedGridY = kc::kRopeCtasPerToken;
    e.cuda.templates = {rope};
    e.cuda.instances = &instances;
    e.cuda.launches = &launches;
    e.cost = &cost;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
