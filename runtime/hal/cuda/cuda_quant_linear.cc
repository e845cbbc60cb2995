#include "runtime/hal/cuda/cuda_quant_linear.h"

#include "runtime/ops/plan_types.h"
#include "runtime/ops/quant_sections.h"

#include <algorithm>

namespace kiln::rt {

namespace kc = kiln::kernels::cuda;

bool isQuantLinear(const BoundOp &op) {
  return op.op && op.op->params_type() == schema::OpParams::LinearParams && op.inputs.size() >= 2 &&
         isQuantDType(op.inputs[1].dtype);
}

Result<QuantLinearPlan> planQuantLinear(const BoundOp &op, void *workspace) {
  const std::string label = "cuda backend: " + opLabel(*op.op);
  const std::string kernel = op.op->kernel() ? op.op->kernel()->str() : std::string();
  const size_t comma = kernel.find(',');
  QuantLinearPlan plan;
  if (comma != std::string::npos) {
    plan.gemvSymbol = kernel.substr(0, comma);
    plan.dequantSymbol = kernel.substr(comma + 1);
  }
  if (plan.gemvSymbol.rfind("kiln_gemv_quant_", 0) != 0 ||
      plan.dequantSymbol.rfind("kiln_dequant_weights_", 0) != 0)
    return invalidArgument(label + ": its W is " + dtypeName(op.inputs[1].dtype) +
                           " and it names kernels '" + kernel +
                           "', not a quantized GEMV and dequantize pair (recompile with a GPU "
                           "--target)");
  const BoundBuffer &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs.at(0);
  if (!isFloatDType(x.dtype) || !isFloatDType(y.dtype))
    return invalidArgument(label + ": x is " + dtypeName(x.dtype) + " and y " + dtypeName(y.dtype) +
                           "; a quantized W needs F32/F16/BF16 activations");
  const kc::QuantSections sections = quantSectionsOf(w);
  const float *bias =
      op.inputs.size() > 2 ? static_cast<const float *>(op.inputs[2].data) : nullptr;
  plan.gemv = {x.data, sections, bias, y.data, 0, static_cast<int32_t>(w.fixedRows)};
  plan.dequant = {sections, workspace, static_cast<int32_t>(w.fixedRows)};
  plan.rowsRule = x.rows;
  plan.maxRows = x.fixedRows;
  plan.in = static_cast<int32_t>(w.width);
  return plan;
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

CudaLaunch dequantLaunch(const QuantLinearPlan &plan) {
  CudaLaunch launch = launchWith(plan.dequant, 1);
  const int64_t runs = int64_t(plan.dequant.rows) * (plan.in / kc::kQuantRun);
  launch.grid[0] = static_cast<uint32_t>((runs + kc::kGemvThreads - 1) / kc::kGemvThreads);
  launch.block = kc::kGemvThreads;
  return launch;
}

} // namespace kiln::rt
