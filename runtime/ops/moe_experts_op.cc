// MoeExperts (plan.fbs): a mixture-of-experts MLP over the router's logits (Mixtral, Qwen3-MoE).
// CUDA, two paths chosen per step: grouped GEMMs over the rows routed to each expert
// (kernels/cuda/moe_grouped.cuh: route, place, gate_up, down, combine; the routed rows live in the
// op's scratch, sized for the compiled maximum rows), and for decode-sized steps one CTA per row
// reading only its experts' weights (kernels/cuda/moe.cuh), when the layer's row, activations and
// sums fit a CTA's static shared memory. Quantized experts run on the grouped path only, each
// weight run decoded exactly into its tile.
#include "kernels/cuda/params.h"
#include "runtime/ops/op_entries.h"
#include "runtime/ops/op_util.h"
#include "runtime/ops/quant_sections.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kiln::rt::ops {
namespace {

namespace kc = kiln::kernels::cuda;

// The row kernel keeps 2 * hidden + intermediate floats in static shared memory.
constexpr uint64_t kMaxSharedFloats = 40 * 1024 / 4;

bool rowKernelFits(uint64_t hidden, uint64_t intermediate) {
  return 2 * hidden + intermediate <= kMaxSharedFloats;
}

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
    if (w->kind() != schema::BufferKind::Weight || w->shape()->size() != 2)
      return shapeError("expert weights must be matrices");
  if (gateUp->shape()->Get(0) != experts * 2 * inter || gateUp->shape()->Get(1) != hidden ||
      down->shape()->Get(0) != experts * hidden || down->shape()->Get(1) != inter ||
      gateUp->dtype() != down->dtype())
    return shapeError("gate_up must be [num_experts * 2 * intermediate, H] and down "
                      "[num_experts * H, intermediate], of one dtype");
  return okStatus();
}

// Quantized experts (`kiln compile --quantize`) are read in place: each expert a row slice of its
// stacked matrix (kernels.h QuantWeight).
void runCpu(const BoundOp &op, const StepCounts &c) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const BoundBuffer &y = op.outputs[0];
  kernels::cpu::MoeExpertsArgs args{op.inputs[0].data,
                                    op.inputs[1].data,
                                    op.inputs[2].data,
                                    op.inputs[3].data,
                                    elemType(op.inputs[2]),
                                    y.data,
                                    rowsOf(y, c),
                                    widthOf(y),
                                    static_cast<int32_t>(p->intermediate()),
                                    static_cast<int32_t>(p->num_experts()),
                                    static_cast<int32_t>(p->top_k()),
                                    p->renormalize(),
                                    elemType(y),
                                    op.cpuPackedWeights};
  args.gateUpQuant = quantOf(op.inputs[2]);
  args.downQuant = quantOf(op.inputs[3]);
  kernels::cpu::moeExperts(args);
}

size_t cpuPackedBytes(const BoundOp &op) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  return kernels::cpu::moePackedWeightBytes(
      elemType(op.inputs[2]), static_cast<int32_t>(p->num_experts()),
      static_cast<int32_t>(widthOf(op.inputs[2])), static_cast<int32_t>(p->intermediate()),
      quantOf(op.inputs[2]), quantOf(op.inputs[3]));
}

// The stored experts are not read once packed: their pages go back.
std::vector<std::span<const uint8_t>> packCpuWeights(const BoundOp &op, void *packed) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const BoundBuffer &gateUp = op.inputs[2], &down = op.inputs[3];
  kernels::cpu::packMoeWeights(
      gateUp.data, down.data, elemType(gateUp), static_cast<int32_t>(p->num_experts()),
      static_cast<int32_t>(widthOf(gateUp)), static_cast<int32_t>(p->intermediate()), packed,
      quantOf(gateUp), quantOf(down));
  auto stored = [](const BoundBuffer &w) {
    const uint64_t shape[2] = {static_cast<uint64_t>(w.fixedRows), static_cast<uint64_t>(w.width)};
    return std::span<const uint8_t>(
        static_cast<const uint8_t *>(w.data),
        static_cast<size_t>(weightSize(w.dtype, shape, static_cast<uint64_t>(w.groupSize)).bytes));
  };
  return {stored(gateUp), stored(down)};
}

// The grouped products' weight_dtype: f32 / f16 / bf16, or a quantized matrix's "q<format>g<group>"
// (kernels/cuda/tile_product.cuh QuantWeights; compiler/codegen/kernel_catalog.cc checks it).
std::string expertsDType(const schema::BufferT &w) {
  if (!isQuantDType(w.dtype))
    return kernelDType(w.dtype);
  const std::map<std::string, std::string> quant = quantKernelConstants(w);
  return "q" + quant.at("format") + "g" + quant.at("group");
}

// Kernel order in Op.kernel: the grouped path's five, then the row kernel where the layer fits it
// (float experts only).
enum MoeKernel : size_t { kRoute, kPlace, kGateUp, kDown, kCombine, kRow };

Result<std::vector<KernelInstance>> instances(const KernelPlanContext &k) {
  const schema::MoeExpertsParamsT &p = *k.op.params.AsMoeExpertsParams();
  const uint64_t hidden = widthOf(k.output(0));
  if (p.num_experts > static_cast<uint32_t>(kc::kMoeMaxExperts))
    return unimplemented("moe_experts on CUDA routes at most " +
                         std::to_string(kc::kMoeMaxExperts) + " experts; this model has " +
                         std::to_string(p.num_experts) + "; compile for --device cpu");
  const std::string dtype = kernelDType(k.output(0).dtype);
  const bool quantized = isQuantDType(k.input(2).dtype);
  const std::string experts = str(p.num_experts), topK = str(p.top_k), h = str(hidden),
                    inter = str(p.intermediate);
  // gate_up and down: the same constants, each with its own weights' dtype.
  auto product = [&](const char *op, const schema::BufferT &weights) {
    return makeKernelInstance(op, {{"dtype", dtype},
                                   {"weight_dtype", expertsDType(weights)},
                                   {"hidden", h},
                                   {"intermediate", inter},
                                   {"experts", experts},
                                   {"threads", str(kc::kTileThreads)}});
  };
  std::vector<KernelInstance> out = {
      makeKernelInstance("moe_route", {{"dtype", dtype},
                                       {"experts", experts},
                                       {"top_k", topK},
                                       {"threads", str(kc::kMoeRouteThreads)}}),
      makeKernelInstance(
          "moe_place",
          {{"experts", experts}, {"top_k", topK}, {"threads", str(kc::kMoePlaceThreads)}}),
      product("moe_gate_up", k.input(2)), product("moe_down", k.input(3)),
      makeKernelInstance("moe_combine", {{"dtype", dtype},
                                         {"hidden", h},
                                         {"top_k", topK},
                                         {"threads", str(kc::kMoeCombineThreads)}})};
  if (rowKernelFits(hidden, p.intermediate) && !quantized)
    out.push_back(makeKernelInstance("moe_experts", {{"dtype", dtype},
                                                     {"weight_dtype", expertsDType(k.input(2))},
                                                     {"hidden", h},
                                                     {"intermediate", inter},
                                                     {"experts", experts},
                                                     {"top_k", topK},
                                                     {"threads", "256"}}));
  return out;
}

// The routed rows in the op's scratch, for `rows` rows: per pair its expert, weight, slot and
// (per slot) x row, the experts' first slots and tiles, then act and the experts' outputs in T.
struct MoeScratch {
  size_t pairExpert, pairWeight, pairSlot, slotRow, expertStart, tileStart, act, expertOut, bytes;
};
MoeScratch moeScratchLayout(const BoundOp &op, int64_t rows) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const size_t pairs = size_t(rows) * p->top_k(), elem = dtypeSize(op.outputs[0].dtype);
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  MoeScratch s{};
  size_t at = 0;
  auto take = [&](size_t &field, size_t bytes) {
    field = at;
    at += aligned(bytes);
  };
  take(s.pairExpert, pairs * 4);
  take(s.pairWeight, pairs * 4);
  take(s.pairSlot, pairs * 4);
  take(s.slotRow, pairs * 4);
  take(s.expertStart, (p->num_experts() + 1) * 4);
  take(s.tileStart, (p->num_experts() + 1) * 4);
  take(s.act, pairs * p->intermediate() * elem);
  take(s.expertOut, pairs * widthOf(op.outputs[0]) * elem);
  s.bytes = at;
  return s;
}

size_t scratchBytes(const BoundOp &op) {
  return moeScratchLayout(op, std::max<int64_t>(op.outputs[0].fixedRows, 0)).bytes;
}

// KILN_MOE_PATH=grouped|row forces a path (row: where the row kernel exists); else the row kernel
// runs steps routing at most one pair per expert (decode), where it reads about what the grouped
// path would and launches one kernel instead of five.
bool useRowKernel(const BoundOp &op, int64_t rows) {
  if (!op.op->kernel() || std::count(op.op->kernel()->begin(), op.op->kernel()->end(), ',') <
                              static_cast<std::ptrdiff_t>(kRow))
    return false;
  if (const char *forced = std::getenv("KILN_MOE_PATH"))
    return std::strcmp(forced, "grouped") != 0;
  const auto *p = op.op->params_as_MoeExpertsParams();
  return rows * p->top_k() <= p->num_experts();
}

kc::QuantSections quantSectionsIfAny(const BoundBuffer &w) {
  return isQuantDType(w.dtype) ? quantSectionsOf(w) : kc::QuantSections{};
}

CudaLaunch launchOn(CudaLaunch launch, uint32_t gridX, uint32_t gridY, int32_t block) {
  launch.gridFromPlan = false;
  launch.grid[0] = gridX;
  launch.grid[1] = gridY;
  launch.block = static_cast<uint32_t>(block);
  return launch;
}

std::vector<CudaLaunch> launches(const BoundOp &op, const StepCounts &c, const OpScratch &scratch) {
  const auto *p = op.op->params_as_MoeExpertsParams();
  const int64_t rows = rowsOf(op.outputs[0], c);
  if (rows <= 0)
    return {};
  if (useRowKernel(op, rows))
    return {launchWith(kc::MoeExpertsParams{op.inputs[0].data, op.inputs[1].data, op.inputs[2].data,
                                            op.inputs[3].data, op.outputs[0].data,
                                            static_cast<int32_t>(rows), p->renormalize() ? 1 : 0},
                       kRow)};
  const MoeScratch s = moeScratchLayout(op, rows);
  auto *base = static_cast<char *>(scratch.base);
  auto at = [&](size_t offset) { return static_cast<void *>(base + offset); };
  const kc::MoeGroupedParams params{op.inputs[0].data,
                                    op.inputs[1].data,
                                    op.inputs[2].data,
                                    op.inputs[3].data,
                                    op.outputs[0].data,
                                    static_cast<int32_t *>(at(s.pairExpert)),
                                    static_cast<float *>(at(s.pairWeight)),
                                    static_cast<int32_t *>(at(s.pairSlot)),
                                    static_cast<int32_t *>(at(s.slotRow)),
                                    static_cast<int32_t *>(at(s.expertStart)),
                                    static_cast<int32_t *>(at(s.tileStart)),
                                    at(s.act),
                                    at(s.expertOut),
                                    static_cast<int32_t>(rows),
                                    p->renormalize() ? 1 : 0,
                                    quantSectionsIfAny(op.inputs[2]),
                                    quantSectionsIfAny(op.inputs[3])};
  const int64_t hidden = widthOf(op.outputs[0]);
  const auto tiles = static_cast<uint32_t>(kc::moeMaxTiles(static_cast<int32_t>(rows * p->top_k()),
                                                           static_cast<int32_t>(p->num_experts())));
  return {
      launchOn(launchWith(params, kRoute), ceilDiv(rows, kc::kMoeRouteThreads), 1,
               kc::kMoeRouteThreads),
      launchOn(launchWith(params, kPlace), 1, 1, kc::kMoePlaceThreads),
      launchOn(launchWith(params, kGateUp), tiles, ceilDiv(p->intermediate(), kc::kTileCols),
               kc::kTileThreads),
      launchOn(launchWith(params, kDown), tiles, ceilDiv(hidden, kc::kTileCols), kc::kTileThreads),
      launchOn(launchWith(params, kCombine), static_cast<uint32_t>(rows),
               ceilDiv(hidden, kc::kMoeCombineThreads), kc::kMoeCombineThreads)};
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
    e.matrixWeightInputs = (1u << 2) | (1u << 3); // half or quantized experts
    e.runCpu = &runCpu;
    e.cpuPackedBytes = &cpuPackedBytes;
    e.packCpuWeights = &packCpuWeights;
    const KernelGrid counted = KernelGrid::kRowCta; // launches() sets every grid itself
    e.cuda.templates = {
        {"moe_route",
         "moe_grouped.cuh",
         "MoeGroupedParams",
         "MoeRoute",
         {"dtype", "experts", "top_k", "threads"},
         counted},
        {"moe_place",
         "moe_grouped.cuh",
         "MoeGroupedParams",
         "MoePlace",
         {"experts", "top_k", "threads"},
         counted},
        {"moe_gate_up",
         "moe_grouped.cuh",
         "MoeGroupedParams",
         "MoeGateUp",
         {"dtype", "weight_dtype", "hidden", "intermediate", "experts", "threads"},
         counted},
        {"moe_down",
         "moe_grouped.cuh",
         "MoeGroupedParams",
         "MoeDown",
         {"dtype", "weight_dtype", "hidden", "intermediate", "experts", "threads"},
         counted},
        {"moe_combine",
         "moe_grouped.cuh",
         "MoeGroupedParams",
         "MoeCombine",
         {"dtype", "hidden", "top_k", "threads"},
         counted},
        {"moe_experts",
         "moe.cuh",
         "MoeExpertsParams",
         "MoeExpertsRow",
         {"dtype", "weight_dtype", "hidden", "intermediate", "experts", "top_k", "threads"},
         KernelGrid::kRowCta}};
    e.cuda.lastTemplateOptional = true; // the row kernel, where the layer fits it
    e.cuda.instances = &instances;
    e.cuda.launches = &launches;
    e.cuda.scratchBytes = &scratchBytes;
    return e;
  }();
  return entry;
}

} // namespace kiln::rt::ops
