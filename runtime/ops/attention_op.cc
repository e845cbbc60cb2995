// Attention (plan.fbs): causal paged attention of q over the layer's KV cache. Three CUDA kernels
// in Op.kernel order: prefill, split-K decode and its reduce.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::StepInputKind;

OpArity arity(const schema::Op &) {
  return {5, 1};
}

Status pack(const OpParamValues &values, schema::OpParamsUnion &out) {
  schema::AttentionParamsT p;
  KILN_ASSIGN_OR_RETURN(p.layer, values.u32("layer"));
  KILN_ASSIGN_OR_RETURN(p.num_heads, values.u32("num_heads"));
  KILN_ASSIGN_OR_RETURN(p.num_kv_heads, values.u32("num_kv_heads"));
  KILN_ASSIGN_OR_RETURN(p.head_dim, values.u32("head_dim"));
  KILN_ASSIGN_OR_RETURN(p.scale, values.f32("scale"));
  if (values.has("sliding_window")) {
    KILN_ASSIGN_OR_RETURN(p.sliding_window, values.u32("sliding_window"));
  }
  if (values.has("logit_softcap")) {
    KILN_ASSIGN_OR_RETURN(p.logit_softcap, values.f32("logit_softcap"));
  }
  out.Set(std::move(p));
  return okStatus();
}

Status checkShapes(const PlanOpView &v) {
  const auto *p = v.op.params_as_AttentionParams();
  KILN_RETURN_IF_ERROR(
      checkHeads(v.plan, p->layer(), p->num_heads(), p->num_kv_heads(), p->head_dim()));
  uint64_t hd = uint64_t(p->num_heads()) * p->head_dim();
  const schema::Buffer *y = v.out[0];
  if (v.in[0]->rows() != schema::RowScale::Tokens || widthOf(v.in[0]) != hd ||
      !(isStepInput(v.in[1], StepInputKind::Positions) ||
        isStepInput(v.in[1], StepInputKind::LastPositions)) ||
      !isStepInput(v.in[2], StepInputKind::QueryStartLoc) ||
      !isStepInput(v.in[3], StepInputKind::ContextLens) ||
      !isStepInput(v.in[4], StepInputKind::BlockTables) || y->rows() != schema::RowScale::Tokens ||
      widthOf(y) != hd)
    return shapeError("needs [q(Tokens,H*D), positions, query_start_loc, context_lens, "
                      "block_tables] -> o(Tokens, H*D)");
  return checkKvGroup(v.plan, p->layer(), v.in[4], p->sliding_window());
}

uint32_t kvLayer(const schema::Op &op) {
  return op.params_as_AttentionParams()->layer();
}

void runCpu(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_AttentionParams();
  const KvCacheBinding &kv = *op.kvCache;
  const BoundBuffer &blockTables = op.inputs[4];
  kernels::cpu::AttentionArgs args{op.inputs[0].data,
                                   i32(op.inputs[1]),
                                   i32(op.inputs[2]),
                                   i32(op.inputs[3]),
                                   i32(blockTables),
                                   widthOf(blockTables),
                                   kv.keys[p->layer()],
                                   kv.values[p->layer()],
                                   op.outputs[0].data,
                                   c.numSeqs,
                                   c.numTokens,
                                   static_cast<int32_t>(p->num_heads()),
                                   static_cast<int32_t>(p->num_kv_heads()),
                                   static_cast<int32_t>(p->head_dim()),
                                   kv.blockSize,
                                   p->scale(),
                                   elemType(op.inputs[0]),
                                   elemType(kv.dtype),
                                   static_cast<int32_t>(p->sliding_window()),
                                   p->logit_softcap()};
  args.kScale = kv.kScale(p->layer());
  args.vScale = kv.vScale(p->layer());
  kernels::cpu::attention(args);
}

Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const schema::AttentionParamsT &p = *k.op.params.AsAttentionParams();
  const std::string dtype = kernelDType(k.output(0).dtype);
  std::map<std::string, std::string> full = {{"dtype", dtype},
                                             {"num_heads", str(p.num_heads)},
                                             {"num_kv_heads", str(p.num_kv_heads)},
                                             {"head_dim", str(p.head_dim)},
                                             {"block_size", str(k.kvBlockSize)},
                                             {"kv_dtype", kernelDType(k.kvDtype)}};
  return std::vector<KernelInstance>{
      makeKernelInstance("attention_prefill", full), makeKernelInstance("attention_decode", full),
      makeKernelInstance(
          "attention_decode_reduce",
          {{"dtype", dtype}, {"num_heads", str(p.num_heads)}, {"head_dim", str(p.head_dim)}})};
}

// Decode attention stages K and V in shared memory (AttentionParams::kvStaging) for steps of up
// to kStagedDecodeMaxSeqs sequences: on an H200 (docs/benchmarks.md) staging made batch-1 and
// 4-sequence decode ~5% faster end to end, but the batch-64 attention 8% slower, where enough
// CTAs already keep the loads in flight. KILN_DECODE_KV_STAGING=1 / 0 stages or loads at every
// batch size, to measure one against the other.
constexpr int32_t kStagedDecodeMaxSeqs = 16;
int32_t kvStagingFor(int32_t numSeqs) {
  static const int forced = [] {
    const char *value = std::getenv("KILN_DECODE_KV_STAGING");
    const std::string mode = value ? value : "";
    return mode == "0" ? 0 : mode == "1" ? 1 : -1;
  }();
  if (forced >= 0)
    return forced;
  return numSeqs <= kStagedDecodeMaxSeqs ? 1 : 0;
}

// Split-K scratch carved from the op's fp32 scratch (scratchBytes): partial outputs, then maxima,
// then sums.
struct SplitScratch {
  float *partialOut = nullptr;
  float *partialMax = nullptr;
  float *partialSum = nullptr;
};
SplitScratch carveSplitScratch(const BoundOp &op, void *base) {
  if (!base)
    return {};
  const auto *p = op.op->params_as_AttentionParams();
  const size_t states =
      static_cast<size_t>(op.inputs[4].fixedRows) * p->num_heads() * kc::kMaxDecodeSplits;
  SplitScratch split;
  split.partialOut = static_cast<float *>(base);
  split.partialMax = split.partialOut + states * p->head_dim();
  split.partialSum = split.partialMax + states;
  return split;
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &scratch) {
  if (c.numSeqs <= 0 || c.numTokens <= 0)
    return {};
  const auto *p = op.op->params_as_AttentionParams();
  const auto &in = op.inputs;
  const SplitScratch split = carveSplitScratch(op, scratch.base);
  kc::AttentionParams params{in[0].data,
                             i32(in[1]),
                             i32(in[2]),
                             i32(in[4]),
                             op.kvCache->keys[p->layer()],
                             op.kvCache->values[p->layer()],
                             op.outputs[0].data,
                             split.partialOut,
                             split.partialMax,
                             split.partialSum,
                             static_cast<int32_t>(in[4].width),
                             c.numSeqs,
                             c.numTokens,
                             1,
                             p->scale(),
                             static_cast<int32_t>(p->sliding_window()),
                             p->logit_softcap()};
  params.kScale = op.kvCache->kScale(p->layer());
  params.vScale = op.kvCache->vScale(p->layer());
  const uint32_t heads = p->num_heads();
  const auto block = static_cast<uint32_t>(kc::kAttentionThreads);
  // Every sequence has one token: decode. Any longer query: the prefill kernel serves them all.
  if (c.numTokens != c.numSeqs) {
    const int32_t rows = kc::prefillBlockRows(static_cast<int32_t>(p->head_dim()),
                                              static_cast<int32_t>(dtypeSize(in[0].dtype)));
    CudaLaunch prefill = launchWith(params, 0);
    prefill.gridFromPlan = false;
    prefill.grid[0] = ceilDiv(c.numTokens, rows) + static_cast<uint32_t>(c.numSeqs);
    prefill.grid[1] = heads;
    prefill.block = block;
    return {prefill};
  }
  params.numSplits = kc::decodeSplitsFor(std::max(c.maxContextLen, 1));
  params.kvStaging = kvStagingFor(c.numSeqs);
  CudaLaunch decode = launchWith(params, 1);
  decode.gridFromPlan = false;
  decode.grid[0] = static_cast<uint32_t>(c.numSeqs);
  decode.grid[1] = p->num_kv_heads();
  decode.grid[2] = static_cast<uint32_t>(params.numSplits);
  decode.block = block;
  CudaLaunch reduce = launchWith(params, 2);
  reduce.gridFromPlan = false;
  reduce.grid[0] = static_cast<uint32_t>(c.numSeqs);
  reduce.grid[1] = heads;
  reduce.block = block;
  return {decode, reduce};
}

// maxBatch x heads x kMaxDecodeSplits x (headDim + 2) floats.
size_t scratchBytes(const BoundOp &op) {
  if (op.inputs.size() < 5)
    return 0;
  const auto *p = op.op->params_as_AttentionParams();
  const size_t maxBatch = static_cast<size_t>(std::max<int64_t>(op.inputs[4].fixedRows, 0));
  return maxBatch * p->num_heads() * kc::kMaxDecodeSplits * (p->head_dim() + 2) * sizeof(float);
}

// Keys query `position` sees: position + 1, or the last `window` of them.
uint64_t visibleKeys(uint64_t position, uint64_t window) {
  return window > 0 ? std::min(position + 1, window) : position + 1;
}

// q, each sequence's K and V at the positions its queries see, its block table entries read, o
// written; 4 * heads * head_dim flops per (query, visible cache position) pair.
OpCost cost(const OpCostInputs &in) {
  const auto *p = in.op.params_as_AttentionParams();
  const uint64_t window = p->sliding_window();
  OpCost cost;
  for (uint32_t i = 0; i < 4; ++i) // q, positions, query_start_loc, context_lens
    cost.bytesRead += stepBytes(in.input(i), in.counts);
  cost.bytesWritten = stepBytes(in.output(0), in.counts);
  const uint64_t pairFlops = 4ull * p->num_heads() * p->head_dim(); // q.k and p.v
  for (const SequenceShape &s : in.sequences) {
    const auto context = static_cast<uint64_t>(s.contextLen);
    const auto n = static_cast<uint64_t>(s.newTokens);
    // Positions read: from the first new token's window start to the end of the context.
    const uint64_t first = context - n;
    const uint64_t read = context - (first + 1 - visibleKeys(first, window));
    const uint64_t blocks = (read + in.kv.block_size() - 1) / in.kv.block_size();
    cost.bytesRead +=
        read * kvTokenBytes(p->num_kv_heads(), p->head_dim(), in.kv) + blocks * sizeof(int32_t);
    uint64_t pairs = 0;
    if (window == 0) { // query i of n new tokens sees context - n + i + 1 positions
      pairs = n * (context - n) + n * (n + 1) / 2;
    } else {
      for (uint64_t position = first; position < context; ++position)
        pairs += visibleKeys(position, window);
    }
    cost.flops += pairs * pairFlops;
  }
  return cost;
}

} // namespace

const OpEntry &attentionOp() {
  static const OpEntry entry = [] {
    OpEntry e;
    e.kind = schema::OpParams::AttentionParams;
    e.name = "attention";
    e.arity = &arity;
    e.packParams = &pack;
    e.checkShapes = &checkShapes;
    e.kvLayer = &kvLayer;
    e.runCpu = &runCpu;
    const std::vector<const char *> full = {"dtype",    "num_heads",  "num_kv_heads",
                                            "head_dim", "block_size", "kv_dtype"};
    e.cuda.templates = {{"attention_prefill", "attention_prefill.cuh", "AttentionParams",
                         "PagedPrefill", full, KernelGrid::kAttention},
                        {"attention_decode", "attention_decode.cuh", "AttentionParams",
                         "PagedDecode", full, KernelGrid::kAttention},
                        {"attention_decode_reduce",
                         "attention_decode.cuh",
                         "AttentionParams",
                         "pagedDecodeReduce",
                         {"dtype", "num_heads", "head_dim"},
                         KernelGrid::kAttention}};
    e.cuda.instances = &instances;
    e.cuda.launches = &launches;
    e.cuda.scratchBytes = &scratchBytes;
    e.cost = &cost;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
