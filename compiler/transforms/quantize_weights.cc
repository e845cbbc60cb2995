// Marking the weights a compile stores quantized (quantize_weights.h). The marks are the weight
// ops' quant / group_size attributes; compiler/emit/weight_sources.cc produces the bytes.
#include "compiler/transforms/quantize_weights.h"

#include "compiler/dialect/source_slice.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::compiler {
namespace {

// Whether a linear is a mixture-of-experts router: its output is only ever router logits.
bool isRouter(LinearOp linear) {
  mlir::Value y = linear.getResult();
  for (mlir::OpOperand &use : y.getUses())
    if (!mlir::isa<MoeExpertsOp>(use.getOwner()) || use.getOperandNumber() != 1)
      return false;
  return !y.use_empty();
}

// Whether `use` reads a weight as a matrix kiln stores quantized: a linear's w or an embedding's
// table (operand 1 of both), or a mixture-of-experts layer's stacked experts (gate_up, operand 2;
// down, operand 3). A router's w is not: it is small (experts x hidden) and decides which experts
// run, so it stays in the weight's dtype, as vLLM's and llama.cpp's quantized MoE models keep it.
bool isMatrixUse(mlir::OpOperand &use) {
  mlir::Operation *user = use.getOwner();
  const unsigned operand = use.getOperandNumber();
  if (auto linear = mlir::dyn_cast<LinearOp>(user))
    return operand == 1 && !isRouter(linear);
  if (mlir::isa<EmbeddingOp>(user))
    return operand == 1;
  return mlir::isa<MoeExpertsOp>(user) && (operand == 2 || operand == 3);
}

// Whether every user reads `weight` as a matrix (isMatrixUse).
bool onlyMatrixUses(WeightOp weight) {
  for (mlir::OpOperand &use : weight.getResult().getUses())
    if (!isMatrixUse(use))
      return false;
  return !weight.getResult().use_empty();
}

// The packed form all of `weight`'s sources share, when their slices keep whole groups.
std::optional<WeightQuant> packedSourcesForm(WeightOp weight, const Checkpoint &checkpoint) {
  std::optional<WeightQuant> form;
  for (mlir::Attribute attr : weight.getSources()) {
    std::optional<SourceSlice> slice =
        parseSourceSlice(mlir::cast<mlir::StringAttr>(attr).strref());
    if (!slice)
      return std::nullopt;
    Result<const TensorInfo *> info = checkpoint.info(slice->tensor);
    if (!info.isOk() || !(*info)->packed)
      return std::nullopt;
    const WeightQuant part{(*info)->packed->format, (*info)->packed->groupSize};
    if ((form && *form != part) || slice->colBegin % part.groupSize != 0)
      return std::nullopt;
    form = part;
  }
  return form;
}

} // namespace

mlir::LogicalResult quantizeWeights(mlir::ModuleOp module, const QuantizePolicy &policy) {
  mlir::WalkResult result = module.walk([&](WeightOp weight) {
    auto type = mlir::cast<mlir::RankedTensorType>(weight.getType());
    if (type.getRank() != 2 || !onlyMatrixUses(weight))
      return mlir::WalkResult::advance();
    const int64_t cols = type.getDimSize(1);
    std::optional<WeightQuant> quant;
    if (policy.all)
      quant = *policy.all;
    else if (policy.packedFrom) {
      quant = packedSourcesForm(weight, *policy.packedFrom);
    }
    if (!quant)
      return mlir::WalkResult::advance();
    const int64_t group = quant->groupSize ? quant->groupSize : cols;
    if (!validQuantGroup(cols, group)) {
      weight.emitError() << "weight '" << weight.getName() << "' has " << cols
                         << " columns, which groups of " << group
                         << " do not divide (a group is a multiple of " << kQuantSubBlock
                         << " columns; choose --group-size accordingly)";
      return mlir::WalkResult::interrupt();
    }
    setWeightQuant(weight, quant);
    return mlir::WalkResult::advance();
  });
  return mlir::failure(result.wasInterrupted());
}

} // namespace kiln::compiler
