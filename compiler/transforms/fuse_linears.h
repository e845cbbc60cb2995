// Shared by fuse-qkv and fuse-gate-up: several linears of one input become one linear whose
// weight rows are the parts' rows concatenated in order (plan.fbs "Fused linears").
#pragma once

#include "compiler/dialect/kiln_dialect.h"

#include "mlir/IR/PatternMatch.h"

namespace kiln::compiler {

// Fails (changing nothing) unless every part reads the same x, has exactly one use, takes its
// weight (and bias) straight from kiln.weight ops of one stored dtype, and all or none have a
// bias. On success the fused linear is created before the earliest part, named
// "<parent of the first part's name>.<tag>", and the parts are left for the caller to erase.
mlir::FailureOr<LinearOp> fuseLinears(mlir::PatternRewriter &rewriter,
                                      llvm::ArrayRef<LinearOp> parts, llvm::StringRef tag);

// Erases `op` and then every kiln.weight that fed it and has no other use.
void eraseWithDeadWeights(mlir::PatternRewriter &rewriter, mlir::Operation *op);

// "layers.0.attn.q" + "qkv" -> "layers.0.attn.qkv".
std::string siblingName(const std::string &name, llvm::StringRef tag);

} // namespace kiln::compiler
