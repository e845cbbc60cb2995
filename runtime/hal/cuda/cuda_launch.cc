#include "runtime/hal/cuda/cuda_launch.h"

#include "runtime/ops/op_table.h"
#include "runtime/ops/plan_types.h"

#include <algorithm>
#include <optional>

namespace kiln::rt {
namespace {

using schema::DType;

uint32_t ceilDiv(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

// The plan's GridRule for this step; grid.x == 0 means nothing to launch.
void applyGridRule(const schema::GridRule *rule, const StepCounts &counts, CudaLaunch &launch) {
  const int64_t rows = counts.rows(rule->x_rows(), rule->x_fixed());
  launch.grid[0] = rule->x_rows() == schema::RowScale::Fixed
                       ? rule->x_fixed()
                       : ceilDiv(rows, std::max<uint32_t>(rule->x_per_block(), 1));
  launch.grid[1] = rule->y_fixed();
  launch.grid[2] = rule->z_fixed();
  launch.block = rule->block_x();
  launch.sharedBytes = rule->shared_bytes();
}

// Activations (and the KV cache) of one op share one float dtype: the kernel was instantiated
// for it. Weights may differ (an fp32-activation plan with a bf16 embedding table).
Status checkActivationDtypes(const OpEntry &entry, const BoundOp &op) {
  std::optional<DType> activation;
  auto visit = [&](const BoundBuffer &b, bool isInput, size_t index) -> Status {
    if (b.kind == schema::BufferKind::StepInput) {
      if (b.dtype != DType::I32)
        return invalidArgument("cuda backend: " + opLabel(*op.op) + ": step input " +
                               std::to_string(index) + " has dtype " + dtypeName(b.dtype) +
                               "; step inputs are I32");
      return okStatus();
    }
    if (b.kind == schema::BufferKind::Weight && isQuantDType(b.dtype) &&
        !(isInput && (entry.matrixWeightInputs >> index & 1u)))
      return unimplemented("cuda backend: " + opLabel(*op.op) + ": weight input " +
                           std::to_string(index) + " is " + dtypeName(b.dtype) +
                           "; the op reads no quantized weights there");
    if (b.kind != schema::BufferKind::Activation)
      return okStatus();
    if (!isFloatDType(b.dtype))
      return unimplemented("cuda backend: " + opLabel(*op.op) + ": " +
                           (isInput ? "input " : "output ") + std::to_string(index) +
                           " has dtype " + dtypeName(b.dtype) + "; activations are F32/F16/BF16");
    if (activation && *activation != b.dtype)
      return unimplemented("cuda backend: " + opLabel(*op.op) + ": mixes activation dtypes " +
                           dtypeName(*activation) + " and " + dtypeName(b.dtype));
    activation = b.dtype;
    return okStatus();
  };
  for (size_t i = 0; i < op.inputs.size(); ++i)
    KILN_RETURN_IF_ERROR(visit(op.inputs[i], true, i));
  for (size_t i = 0; i < op.outputs.size(); ++i)
    KILN_RETURN_IF_ERROR(visit(op.outputs[i], false, i));
  if (!entry.kvLayer)
    return okStatus();
  const uint32_t layer = entry.kvLayer(*op.op);
  if (!op.kvCache || layer >= op.kvCache->keys.size() || layer >= op.kvCache->values.size())
    return invalidArgument("cuda backend: " + opLabel(*op.op) + ": no KV cache bound for layer " +
                           std::to_string(layer));
  if (!isKvCacheDType(op.kvCache->dtype))
    return unimplemented("cuda backend: " + opLabel(*op.op) + ": KV cache dtype " +
                         dtypeName(op.kvCache->dtype) + "; caches are F32/F16/BF16/F8E4M3");
  return okStatus();
}

} // namespace

size_t opScratchBytes(const BoundOp &op) {
  const OpEntry *entry = op.op ? findOp(op.op->params_type()) : nullptr;
  return entry && entry->cuda.scratchBytes ? entry->cuda.scratchBytes(op) : 0;
}

std::vector<std::string> splitKernelSymbols(const schema::Op &op) {
  const std::string kernel = op.kernel() ? op.kernel()->str() : std::string();
  std::vector<std::string> symbols;
  for (size_t start = 0; start <= kernel.size();) {
    size_t comma = std::min(kernel.find(',', start), kernel.size());
    symbols.push_back(kernel.substr(start, comma - start));
    start = comma + 1;
  }
  return symbols;
}

Result<std::vector<std::string>> kernelSymbols(const BoundOp &op) {
  const OpEntry *entry = findOp(op.op->params_type());
  if (!entry)
    return invalidArgument("cuda backend: " + opLabel(*op.op) + " is not a known op kind");
  if (entry->cuda.libraryOp)
    return invalidArgument("cuda backend: " + opLabel(*op.op) +
                           ": Linear runs on cuBLASLt (cuda_linear.h), not as a kernel launch");
  if (entry->cuda.templates.empty())
    return invalidArgument("cuda backend: " + opLabel(*op.op) +
                           " has no kernel (a collective runs on the executor's communicator)");
  const std::string kernel = op.op->kernel() ? op.op->kernel()->str() : std::string();
  const std::vector<std::string> symbols = splitKernelSymbols(*op.op);
  const size_t expected =
      entry->cuda.kernelsPerOp ? entry->cuda.kernelsPerOp : entry->cuda.templates.size();
  bool empty = std::any_of(symbols.begin(), symbols.end(), [](auto &s) { return s.empty(); });
  const bool optionalLeftOut = entry->cuda.lastTemplateOptional && symbols.size() + 1 == expected;
  if ((symbols.size() != expected && !optionalLeftOut) || empty) {
    std::string names;
    for (const KernelTemplate &t : entry->cuda.templates)
      names += std::string(names.empty() ? "<" : ",<") + t.op + ">";
    return invalidArgument(
        "cuda backend: " + opLabel(*op.op) + ": kernel '" + kernel + "' should " +
        (expected == 1 ? std::string("name one kernel")
                       : "name " + std::to_string(expected) + " kernels: " + names) +
        " (recompile with a GPU --target)");
  }
  return symbols;
}

Status checkCudaOp(const BoundOp &op) {
  if (!op.op)
    return invalidArgument("cuda backend: bound op has no plan op");
  const OpEntry *entry = findOp(op.op->params_type());
  if (!entry)
    return invalidArgument("cuda backend: op '" +
                           (op.op->name() ? op.op->name()->str() : std::string()) +
                           "' has no known kind (params)");
  const size_t planIn = op.op->inputs() ? op.op->inputs()->size() : 0;
  const size_t planOut = op.op->outputs() ? op.op->outputs()->size() : 0;
  const OpArity arity = entry->arity(*op.op);
  if (op.inputs.size() != planIn || op.outputs.size() != planOut || planIn != arity.inputs ||
      planOut != arity.outputs)
    return invalidArgument("cuda backend: " + opLabel(*op.op) + ": bound " +
                           std::to_string(op.inputs.size()) + "/" +
                           std::to_string(op.outputs.size()) + " buffers, the op has " +
                           std::to_string(planIn) + "/" + std::to_string(planOut));
  KILN_RETURN_IF_ERROR(kernelSymbols(op).status());
  // Kernels whose grid follows the step counts (attention) compute it themselves.
  const bool usesGridRule =
      std::any_of(entry->cuda.templates.begin(), entry->cuda.templates.end(),
                  [](const KernelTemplate &t) { return t.grid != KernelGrid::kAttention; });
  if (usesGridRule && !op.op->grid())
    return invalidArgument("cuda backend: " + opLabel(*op.op) + " has no grid rule");
  return checkActivationDtypes(*entry, op);
}

std::vector<CudaLaunch> planLaunches(const BoundOp &op, const StepCounts &counts,
                                     const OpScratch &scratch) {
  const OpEntry *entry = findOp(op.op->params_type());
  std::vector<CudaLaunch> launches = entry->cuda.launches(op, counts, scratch);
  std::vector<CudaLaunch> nonEmpty;
  for (CudaLaunch &launch : launches) {
    if (launch.gridFromPlan)
      applyGridRule(op.op->grid(), counts, launch);
    if (launch.grid[0] != 0 && launch.grid[1] != 0 && launch.grid[2] != 0)
      nonEmpty.push_back(launch);
  }
  return nonEmpty;
}

} // namespace kiln::rt
