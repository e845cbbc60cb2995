// fuse-gate-up: mul(silu(x Wg^T), x Wu^T) -> silu_mul(x [Wg; Wu]^T), and the same for gelu_tanh
// (GeGLU) -> gelu_tanh_mul. One GEMM produces [gate | up] per row, which is exactly SiluMul's and
// GeluTanhMul's input layout in plan.fbs.
#include "compiler/transforms/fuse_linears.h"
#include "compiler/transforms/passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln::compiler {
namespace {

struct FuseGateUpPattern : mlir::OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(MulOp mul, mlir::PatternRewriter &rewriter) const override {
    // Multiplication commutes: accept the activation on either side.
    mlir::Value other;
    mlir::Operation *activation = gateActivation(mul, other);
    if (!activation || !activation->hasOneUse())
      return rewriter.notifyMatchFailure(mul, "no single-use silu / gelu_tanh operand");
    auto gate = activation->getOperand(0).getDefiningOp<LinearOp>();
    auto up = other.getDefiningOp<LinearOp>();
    if (!gate || !up || gate == up)
      return rewriter.notifyMatchFailure(mul, "silu(gate) and up are not two linears");
    mlir::FailureOr<LinearOp> fused = fuseLinears(rewriter, {gate, up}, "gate_up");
    if (failed(fused))
      return rewriter.notifyMatchFailure(mul, "gate and up linears cannot be fused");
    const bool gelu = mlir::isa<GeluTanhOp>(activation);
    std::string name = siblingName(opName(mul), gelu ? "gelu_tanh_mul" : "silu_mul");
    mlir::Operation *fusedOp =
        gelu ? rewriter.replaceOpWithNewOp<GeluTanhMulOp>(mul, mul.getType(), fused->getResult())
                   .getOperation()
             : rewriter.replaceOpWithNewOp<SiluMulOp>(mul, mul.getType(), fused->getResult())
                   .getOperation();
    fusedOp->setLoc(namedLoc(rewriter.getContext(), name));
    rewriter.eraseOp(activation);
    eraseWithDeadWeights(rewriter, gate);
    eraseWithDeadWeights(rewriter, up);
    return mlir::success();
  }
};

struct FuseGateUpPass : mlir::PassWrapper<FuseGateUpPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseGateUpPass)
  llvm::StringRef getName() const override { return "FuseGateUpPass"; }
  llvm::StringRef getArgument() const override { return "kiln-fuse-gate-up"; }
  llvm::StringRef getDescription() const override {
    return "Fuse gate/up linears + silu (gelu_tanh) + mul into one linear + silu_mul "
           "(gelu_tanh_mul)";
  }
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    patterns.add<FuseGateUpPattern>(&getContext());
    if (failed(mlir::applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<mlir::Pass> createFuseGateUpPass() { return std::make_unique<FuseGateUpPass>(); }

} // namespace kiln::compiler
