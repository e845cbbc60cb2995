// Weight concatenation for fused linears. The fused kiln.weight lists the parts' checkpoint
// sources in order, so the emitter produces [part0 rows; part1 rows; ...] lazily at write time.
#include "compiler/transforms/fuse_linears.h"

#include "llvm/ADT/SetVector.h"

namespace kiln::compiler {
namespace {

// The part's weight (or bias) op, or null when it is not a plain kiln.weight.
WeightOp weightOf(mlir::Value value) {
  return value ? value.getDefiningOp<WeightOp>() : WeightOp();
}

mlir::FailureOr<WeightOp> concatWeights(mlir::PatternRewriter &rewriter,
                                        llvm::ArrayRef<WeightOp> parts, const std::string &name) {
  llvm::SmallVector<mlir::Attribute> sources;
  int64_t rows = 0;
  WeightOp front = parts.front(); // op handles are cheap; ArrayRef hands out const ones
  auto first = mlir::cast<mlir::RankedTensorType>(front.getType());
  for (WeightOp part : parts) {
    auto type = mlir::cast<mlir::RankedTensorType>(part.getType());
    // Parts stored differently (a GGUF file's Q4_0 q beside its Q8_0 v) stay separate linears.
    if (part.getDtype() != front.getDtype() || weightQuant(part) != weightQuant(front) ||
        type.getRank() != first.getRank() ||
        type.getShape().drop_front() != first.getShape().drop_front())
      return mlir::failure();
    rows += type.getDimSize(0);
    llvm::append_range(sources, part.getSources());
  }
  llvm::SmallVector<int64_t> shape(first.getShape());
  shape[0] = rows;
  auto type = mlir::RankedTensorType::get(shape, first.getElementType());
  auto fused = rewriter.create<WeightOp>(namedLoc(rewriter.getContext(), name), type,
                                         rewriter.getStringAttr(name),
                                         rewriter.getArrayAttr(sources), front.getDtypeAttr());
  setWeightQuant(fused, weightQuant(front));
  return fused;
}

} // namespace

std::string siblingName(const std::string &name, llvm::StringRef tag) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos)
    return tag.str();
  return name.substr(0, dot + 1) + tag.str();
}

mlir::FailureOr<LinearOp> fuseLinears(mlir::PatternRewriter &rewriter,
                                      llvm::ArrayRef<LinearOp> parts, llvm::StringRef tag) {
  llvm::SmallVector<WeightOp> weights, biases;
  LinearOp front = parts.front(), earliest = parts.front();
  for (LinearOp part : parts) {
    if (part.getX() != front.getX() || !part->hasOneUse())
      return mlir::failure();
    WeightOp weight = weightOf(part.getW());
    if (!weight || static_cast<bool>(part.getBias()) != static_cast<bool>(front.getBias()))
      return mlir::failure();
    weights.push_back(weight);
    if (part.getBias()) {
      WeightOp bias = weightOf(part.getBias());
      if (!bias)
        return mlir::failure();
      biases.push_back(bias);
    }
    if (part->isBeforeInBlock(earliest))
      earliest = part;
  }
  std::string name = siblingName(opName(front), tag);
  mlir::OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(earliest);
  mlir::FailureOr<WeightOp> weight = concatWeights(rewriter, weights, name + ".weight");
  if (failed(weight))
    return mlir::failure();
  mlir::Value bias;
  if (!biases.empty()) {
    mlir::FailureOr<WeightOp> fusedBias = concatWeights(rewriter, biases, name + ".bias");
    if (failed(fusedBias)) {
      rewriter.eraseOp(*weight);
      return mlir::failure();
    }
    bias = *fusedBias;
  }
  int64_t out = mlir::cast<mlir::RankedTensorType>(weight->getType()).getDimSize(0);
  auto type = mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, out}, rewriter.getF32Type());
  return rewriter.create<LinearOp>(namedLoc(rewriter.getContext(), name), type, front.getX(),
                                   *weight, bias);
}

void eraseWithDeadWeights(mlir::PatternRewriter &rewriter, mlir::Operation *op) {
  llvm::SetVector<mlir::Operation *> weights; // a weight may feed two operands
  for (mlir::Value operand : op->getOperands())
    if (WeightOp weight = weightOf(operand))
      weights.insert(weight);
  rewriter.eraseOp(op);
  for (mlir::Operation *weight : weights)
    if (weight->use_empty())
      rewriter.eraseOp(weight);
}

} // namespace kiln::compiler
