// fuse-qkv: the builder feeds rope_kv_write three linears (q, k, v); the plan's RopeKvWrite reads
// one [tokens, (H + 2 KV) D] buffer, so the three projections become one linear over the
// concatenated weights [Wq; Wk; Wv] (one GEMM instead of three).
#include "compiler/transforms/fuse_linears.h"
#include "compiler/transforms/passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln::compiler {
namespace {

struct FuseQkvPattern : mlir::OpRewritePattern<RopeKvWriteOp> {
  using OpRewritePattern::OpRewritePattern;

  mlir::LogicalResult matchAndRewrite(RopeKvWriteOp rope,
                                      mlir::PatternRewriter &rewriter) const override {
    if (rope.getQkv().size() != 3)
      return rewriter.notifyMatchFailure(rope, "already fused");
    llvm::SmallVector<LinearOp, 3> parts;
    for (mlir::Value value : rope.getQkv()) {
      auto linear = value.getDefiningOp<LinearOp>();
      if (!linear)
        return rewriter.notifyMatchFailure(rope, "q, k or v is not a linear");
      parts.push_back(linear);
    }
    mlir::FailureOr<LinearOp> fused = fuseLinears(rewriter, parts, "qkv");
    if (failed(fused))
      return rewriter.notifyMatchFailure(rope, "q, k, v linears cannot be fused");
    rewriter.modifyOpInPlace(rope, [&] { rope.getQkvMutable().assign(fused->getResult()); });
    for (LinearOp part : parts)
      eraseWithDeadWeights(rewriter, part);
    return mlir::success();
  }
};

struct FuseQkvPass : mlir::PassWrapper<FuseQkvPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseQkvPass)
  llvm::StringRef getName() const override { return "FuseQkvPass"; }
  llvm::StringRef getArgument() const override { return "kiln-fuse-qkv"; }
  llvm::StringRef getDescription() const override {
    return "Fuse the q, k, v linears of each rope_kv_write into one linear";
  }
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    patterns.add<FuseQkvPattern>(&getContext());
    if (failed(mlir::applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

std::unique_ptr<mlir::Pass> createFuseQkvPass() { return std::make_unique<FuseQkvPass>(); }

} // namespace kiln::compiler
