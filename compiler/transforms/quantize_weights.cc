// Marking the weights a compile stores quantized (quantize_weights.h). The marks are the weight
// ops' quant / group_size attributes; compiler/emit/weight_sources.cc produces the bytes.
#include "compiler/transforms/quantize_weights.h"

#include "compiler/dialect/source_slice.h"

#include "mlir/IR/BuiltinTypes.h"

namespace kiln::compiler {
namespace {

// Whether every user reads `weight` as a linear's w or an embedding's table (operand 1 of both).
bool onlyMatrixUses(WeightOp weight) {
  for (mlir::OpOperand &use : weight.getResult().getUses())
    if (!mlir::isa<LinearOp, EmbeddingOp>(use.getOwner()) || use.getOperandNumber() != 1)
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
