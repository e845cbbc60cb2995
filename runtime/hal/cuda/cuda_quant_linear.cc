#include "runtime/hal/cuda/cuda_quant_linear.h"

#include "runtime/hal/cuda/cuda_launch.h"
#include "runtime/hal/cuda/cuda_linear.h"
#include "runtime/ops/plan_types.h"
#include "runtime/ops/quant_sections.h"

#include <algorithm>
#include <cstdlib>

namespace kiln::rt {

namespace kc = kiln::kernels::cuda;

bool isQuantLinear(const BoundOp &op) {
  return op.op && op.op->params_type() == schema::OpParams::LinearParams && op.inputs.size() >= 2 &&
         isQuantDType(op.inputs[1].dtype);
}

std::string quantGemmFromEnvironment() {
  const char *value = std::getenv("KILN_QUANT_GEMM");
  return value ? value : "auto";
}

Result<QuantGemmMode> parseQuantGemmMode(const std::string &value) {
  if (value == "auto")
    return QuantGemmMode::kAuto;
  if (value == "tiles")
    return QuantGemmMode::kTiles;
  if (value == "dequantize")
    return QuantGemmMode::kDequantize;
  return invalidArgument("KILN_QUANT_GEMM is '" + value +
                         "'; it takes auto, tiles or dequantize (how a quantized Linear runs "
                         "more than " +
                         std::to_string(kc::kGemvMaxRows) + " rows on a GPU)");
}

namespace {

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

} // namespace

Result<QuantLinearPlan> planQuantLinear(const BoundOp &op, void *workspace, bool tiles) {
  const std::string label = "cuda backend: " + opLabel(*op.op);
  const std::string kernel = op.op->kernel() ? op.op->kernel()->str() : std::string();
  const std::vector<std::string> symbols = splitKernelSymbols(*op.op);
  QuantLinearPlan plan;
  if (symbols.size() == 2 || symbols.size() == 3) {
    plan.gemvSymbol = symbols.front();
    plan.dequantSymbol = symbols.back();
    if (symbols.size() == 3)
      plan.gemmSymbol = symbols[1];
  }
  if (!startsWith(plan.gemvSymbol, "kiln_gemv_quant_") ||
      !startsWith(plan.dequantSymbol, "kiln_dequant_weights_") ||
      (symbols.size() == 3 && !startsWith(plan.gemmSymbol, "kiln_gemm_quant_")))
    return invalidArgument(label + ": its W is " + dtypeName(op.inputs[1].dtype) +
                           " and it names kernels '" + kernel +
                           "', not a quantized GEMV, tile GEMM and dequantize set (recompile with "
                           "a GPU --target)");
  const BoundBuffer &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs.at(0);
  if (!isFloatDType(x.dtype) || !isFloatDType(y.dtype))
    return invalidArgument(label + ": x is " + dtypeName(x.dtype) + " and y " + dtypeName(y.dtype) +
                           "; a quantized W needs F32/F16/BF16 activations");
  const kc::QuantSections sections = quantSectionsOf(w);
  const float *bias =
      op.inputs.size() > 2 ? static_cast<const float *>(op.inputs[2].data) : nullptr;
  const auto out = static_cast<int32_t>(w.fixedRows);
  plan.gemv = {x.data, sections, bias, y.data, 0, out};
  plan.gemm = {x.data, sections, bias, y.data, 0, out};
  plan.dequant = {sections, workspace, out};
  plan.rowsRule = x.rows;
  plan.maxRows = x.fixedRows;
  plan.in = static_cast<int32_t>(w.width);
  plan.buckets = linearRowBuckets(static_cast<uint64_t>(std::max<int64_t>(plan.maxRows, 1)));
  plan.tilesForBucket.assign(plan.buckets.size(), tiles && !plan.gemmSymbol.empty());
  return plan;
}

bool quantUsesTiles(const QuantLinearPlan &plan, int64_t rows) {
  return plan.tilesForBucket[linearRowBucket(plan.buckets, static_cast<uint64_t>(rows))];
}

BoundOp dequantizedLinear(const BoundOp &op, void *workspace) {
  BoundOp bound = op;
  bound.inputs[1].data = workspace;
  bound.inputs[1].dtype = op.inputs[0].dtype;
  bound.inputs[1].groupSize = 0;
  return bound;
}

uint64_t dequantWorkspaceBytes(const schema::Plan &plan) {
  uint64_t bytes = 0;
  if (!plan.ranks())
    return 0;
  for (const schema::Rank *rank : *plan.ranks()) {
    if (!rank->program() || !rank->buffers())
      continue;
    for (const schema::Op *op : *rank->program()) {
      if (op->params_type() != schema::OpParams::LinearParams || !op->inputs() ||
          op->inputs()->size() < 2)
        continue;
      const auto *x = rank->buffers()->Get(op->inputs()->Get(0));
      const auto *w = rank->buffers()->Get(op->inputs()->Get(1));
      if (!isQuantDType(w->dtype()) || !w->shape() || w->shape()->size() != 2)
        continue;
      bytes = std::max<uint64_t>(bytes,
                                 w->shape()->Get(0) * w->shape()->Get(1) * dtypeSize(x->dtype()));
    }
  }
  return bytes;
}

CudaLaunch quantGemvLaunch(const QuantLinearPlan &plan, int32_t rows) {
  kc::GemvQuantParams params = plan.gemv;
  params.rows = rows;
  CudaLaunch launch = launchWith(params, 0);
  const int32_t perCta = kc::gemvOutputsPerCta(1);
  launch.grid[0] = static_cast<uint32_t>((params.out + perCta - 1) / perCta);
  launch.block = kc::kGemvThreads;
  return launch;
}

CudaLaunch quantGemmLaunch(const QuantLinearPlan &plan, int32_t rows) {
  kc::GemmQuantParams params = plan.gemm;
  params.rows = rows;
  CudaLaunch launch = launchWith(params, 1);
  launch.grid[0] = static_cast<uint32_t>((rows + kc::kTileRows - 1) / kc::kTileRows);
  launch.grid[1] = static_cast<uint32_t>((params.out + kc::kTileCols - 1) / kc::kTileCols);
  launch.block = kc::kTileThreads;
  return launch;
}

CudaLaunch dequantLaunch(const QuantLinearPlan &plan) {
  CudaLaunch launch = launchWith(plan.dequant, 1);
  const int64_t runs = int64_t(plan.dequant.rows) * (plan.in / kc::kQuantRun);
  launch.grid[0] = static_cast<uint32_t>((runs + kc::kGemvThreads - 1) / kc::kGemvThreads);
  launch.block = kc::kGemvThreads;
  return launch;
}

} // namespace kiln::rt
