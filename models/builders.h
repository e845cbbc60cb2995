// Model family builders: each turns an HfModelConfig into the UNFUSED kiln graph of one engine
// step (func.func @step() -> logits). Fusion and memory planning are passes
// (compiler/transforms); the builders say what the model computes, not how it is scheduled.
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/import/hf_config.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace kiln::compiler {

struct BuildOptions {
  // Stored element type of linear and embedding weights (f32, f16 or bf16). Norm weights,
  // biases and constants are always f32: the kernels read them as fp32.
  mlir::Type weightType;
};

// Builders report errors as diagnostics on the context (naming the config field) and fail.
using ModelBuildFn = mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> (*)(
    mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options);

struct ModelBuilder {
  const char *modelType;  // config.json "model_type"
  ModelBuildFn build;
};

// The builder for `modelType`, or nullptr when kiln has none.
const ModelBuilder *findModelBuilder(llvm::StringRef modelType);
// "llama, ..." for error messages.
std::string supportedModelTypes();

// Loads the dialects every builder and pass uses (kiln, func).
void loadKilnDialects(mlir::MLIRContext &context);

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildLlama(mlir::MLIRContext &context,
                                                             const HfModelConfig &config,
                                                             const BuildOptions &options);

} // namespace kiln::compiler
