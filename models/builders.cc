// The registry of model family builders, keyed by config.json "model_type".
#include "models/builders.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln::compiler {
namespace {

constexpr ModelBuilder kBuilders[] = {
    {"llama", &buildLlama},
};

} // namespace

const ModelBuilder *findModelBuilder(llvm::StringRef modelType) {
  for (const ModelBuilder &builder : kBuilders)
    if (modelType == builder.modelType)
      return &builder;
  return nullptr;
}

std::string supportedModelTypes() {
  std::string names;
  for (const ModelBuilder &builder : kBuilders) {
    if (!names.empty())
      names += ", ";
    names += builder.modelType;
  }
  return names;
}

void loadKilnDialects(mlir::MLIRContext &context) {
  context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
}

} // namespace kiln::compiler
