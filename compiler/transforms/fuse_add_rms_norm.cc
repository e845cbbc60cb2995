// fuse-add-rmsnorm: rms_norm(add(residual, x)) -> add_rms_norm(x, residual). The plan executes it
// in place (residual += x), so the whole residual stream is one buffer and the add's separate
// output disappears. In place is only legal when the residual operand is dead after the add.
#include "compiler/transforms/passes.h"
#include "compiler/dialect/kiln_dialect.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln::compiler {
namespace {

// True when every use of `value` other than `add` comes before `add` in the block, i.e. the add
// is its last reader and overwriting it in place is invisible.
bool deadAfter(mlir::Value value, AddOp add) {
  if (!isActivation(value))
    return false;
  for (mlir::OpOperand &use : value.getUses()) {
    mlir::Operation *user = use.getOwner();
    if (user == add)
      continue;
    if (user->getBlock() != add->getBlock() || !user->isBeforeInBlock(add))
      return false;
  }
  return true;
}

struct FuseAddRmsNormPattern : mlir::OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(RmsNormOp norm,
                                      mlir::PatternRewriter &rewriter) const override {
    auto add = norm.getX().getDefiningOp<AddOp>();
    if (!add || add->getBlock() != norm->getBlock())
      return rewriter.notifyMatchFailure(norm, "input is not an add");
    // The fused op sits where the norm is: every other reader of the sum must come later.
    for (mlir::Operation *user : add->getUsers())
      if (user != norm && !norm->isBeforeInBlock(user))
        return rewriter.notifyMatchFailure(norm, "the sum is read between the add and the norm");
    mlir::Value residual = add.getLhs(), x = add.getRhs();
    if (!deadAfter(residual, add)) {
      std::swap(residual, x);
      if (!deadAfter(residual, add))
        return rewriter.notifyMatchFailure(norm, "neither add operand is dead after the add");
    }
    auto fused = rewriter.create<AddRmsNormOp>(norm.getLoc(), add.getType(), norm.getType(), x,
                                               residual, norm.getW(), norm.getEpsAttr());
    rewriter.replaceAllUsesWith(add.getResult(), fused.getUpdatedResidual());
    rewriter.replaceOp(norm, fused.getNormed());
    rewriter.eraseOp(add);
    return mlir::success();
  }
};

struct FuseAddRmsNormPass
    : mlir::PassWrapper<FuseAddRmsNormPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseAddRmsNormPass)
  llvm::StringRef getName() const override { return "FuseAddRmsNormPass"; }
  llvm::StringRef getArgument() const override { return "kiln-fuse-add-rmsnorm"; }
  llvm::StringRef getDescription() const override {
    return "Fuse a residual add and the rms_norm of its sum into one in-place add_rms_norm";
  }
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    patterns.add<FuseAddRmsNormPattern>(&getContext());
    if (failed(mlir::applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<mlir::Pass> createFuseAddRmsNormPass() {
  return std::make_unique<FuseAddRmsNormPass>();
}

} // namespace kiln::compiler
