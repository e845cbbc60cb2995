// A small unfused Llama module (2 layers, GQA 4/2 heads of 16, hidden 64, intermediate 96) and
// helpers shared by the pass tests.
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/models/model_family.h"
#include "compiler/transforms/passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

namespace kiln::compiler::testing {

inline HfModelConfig smallLlamaConfig() {
  HfModelConfig config;
  config.modelType = "llama";
  config.vocabSize = 100;
  config.hiddenSize = 64;
  config.intermediateSize = 96;
  config.numLayers = 2;
  config.numHeads = 4;
  config.numKvHeads = 2;
  config.headDim = 16;
  config.rmsNormEps = 1e-5;
  config.tieWordEmbeddings = true;
  return config;
}

inline mlir::OwningOpRef<mlir::ModuleOp> buildSmallLlama(mlir::MLIRContext &context,
                                                         const HfModelConfig &config,
                                                         mlir::Type weightType = {}) {
  BuildOptions options{weightType ? weightType : mlir::Float32Type::get(&context)};
  auto module = llamaFamily().build(context, config, options);
  EXPECT_TRUE(succeeded(module));
  return succeeded(module) ? std::move(*module) : mlir::OwningOpRef<mlir::ModuleOp>();
}

inline mlir::OwningOpRef<mlir::ModuleOp> parseModule(mlir::MLIRContext &context,
                                                     const std::string &source) {
  loadKilnDialects(context);
  return mlir::parseSourceString<mlir::ModuleOp>(source, &context);
}

// Runs `passes` with the verifier on; returns the error diagnostics ("" on success).
inline std::string runPasses(mlir::ModuleOp module,
                             std::vector<std::unique_ptr<mlir::Pass>> passes) {
  std::string errors;
  mlir::ScopedDiagnosticHandler handler(module.getContext(), [&](mlir::Diagnostic &diag) {
    errors += diag.str() + "\n";
    return mlir::success();
  });
  auto pm = mlir::PassManager::on<mlir::ModuleOp>(module.getContext());
  pm.enableVerifier(true);
  for (auto &pass : passes)
    pm.addPass(std::move(pass));
  if (failed(pm.run(module)) && errors.empty())
    errors = "pass pipeline failed";
  return errors;
}

template <typename... Passes>
std::string runPasses(mlir::ModuleOp module, std::unique_ptr<Passes>... passes) {
  std::vector<std::unique_ptr<mlir::Pass>> list;
  (list.push_back(std::move(passes)), ...);
  return runPasses(module, std::move(list));
}

template <typename OpT> int countOps(mlir::ModuleOp module) {
  int count = 0;
  module.walk([&](OpT) { ++count; });
  return count;
}

inline std::vector<std::string> sourcesOf(WeightOp weight) {
  std::vector<std::string> names;
  for (mlir::Attribute attr : weight.getSources())
    names.push_back(mlir::cast<mlir::StringAttr>(attr).str());
  return names;
}

inline std::vector<int64_t> shapeOf(mlir::Value value) {
  auto shape = mlir::cast<mlir::RankedTensorType>(value.getType()).getShape();
  return {shape.begin(), shape.end()};
}

} // namespace kiln::compiler::testing
