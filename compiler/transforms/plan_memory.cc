// plan-memory: static arena offsets for @step's activations. Every activation is sized at the
// compiled maxima (max_tokens_per_step rows; values downstream of gather_rows, the logits rows,
// max_logits_per_step rows: a step asks for one per sampled sequence, and the executor splits a
// step that wants more), live from its defining op to its last reader (the returned logits to
// the end), and
// placed first-fit in 256-byte aligned ranges freed by dead values. An op's outputs never share
// bytes with its inputs, except add_rms_norm's updated residual, which IS its residual operand.
// Sizes use each value's storage type (compiler/emit/activation_dtype.h): --dtype bf16 halves every
// activation but the fp32 logits.
#include "compiler/dialect/kiln_dialect.h"
#include "compiler/emit/activation_dtype.h"
#include "compiler/transforms/passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <map>

namespace kiln::compiler {
namespace {

struct LiveRange {
  int64_t bytes = 0;
  size_t first = 0;  // index of the defining op
  size_t last = 0;   // index of the last reader
  int64_t offset = -1;
};

// First-fit allocator over [0, top) with coalescing free ranges.
class Arena {
public:
  int64_t allocate(int64_t bytes) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      auto [start, size] = *it;
      bool atTop = start + size == top_;
      if (size < bytes && !atTop)
        continue;
      free_.erase(it);
      if (size > bytes)
        free_[start + bytes] = size - bytes;
      top_ = std::max(top_, start + bytes);
      return start;
    }
    int64_t start = top_;
    top_ += bytes;
    return start;
  }
  void release(int64_t start, int64_t bytes) {
    auto next = free_.find(start + bytes);
    if (next != free_.end()) {
      bytes += next->second;
      free_.erase(next);
    }
    auto it = free_.lower_bound(start);
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == start) {
        prev->second += bytes;
        return;
      }
    }
    free_[start] = bytes;
  }
  int64_t top() const { return top_; }

private:
  std::map<int64_t, int64_t> free_;  // start -> size
  int64_t top_ = 0;
};

int64_t alignUp(int64_t value) {
  return (value + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

struct PlanMemoryPass : mlir::PassWrapper<PlanMemoryPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PlanMemoryPass)
  PlanMemoryPass() = default;
  PlanMemoryPass(const PlanMemoryPass &other) : PassWrapper(other) {}
  PlanMemoryPass(int64_t maxTokens, int64_t maxLogits) {
    maxTokensPerStep = maxTokens;
    maxLogitsPerStep = maxLogits;
  }

  llvm::StringRef getName() const override { return "PlanMemoryPass"; }
  llvm::StringRef getArgument() const override { return "kiln-plan-memory"; }
  llvm::StringRef getDescription() const override {
    return "Assign static activation arena offsets by liveness at the compiled maxima";
  }

  Option<int64_t> maxTokensPerStep{*this, "max-tokens-per-step",
                                   llvm::cl::desc("rows of every activation at the maxima"),
                                   llvm::cl::init(0)};
  Option<int64_t> maxLogitsPerStep{*this, "max-logits-per-step",
                                   llvm::cl::desc("rows of the logits values; 0: max-tokens"),
                                   llvm::cl::init(0)};

  int64_t rowsAtMaxima(mlir::Value value) const {
    if (rowsOf(value) == Rows::kLogits && maxLogitsPerStep > 0)
      return maxLogitsPerStep;
    return maxTokensPerStep;
  }
  void runOnOperation() override;
  mlir::LogicalResult computeLiveRanges(mlir::func::FuncOp step);

  std::vector<mlir::Operation *> ops_;
  std::vector<LiveRange> ranges_;
  llvm::DenseMap<mlir::Value, size_t> rangeOf_;
};

mlir::LogicalResult PlanMemoryPass::computeLiveRanges(mlir::func::FuncOp step) {
  ops_.clear();
  ranges_.clear();
  rangeOf_.clear();
  for (mlir::Operation &op : step.getBody().front())
    ops_.push_back(&op);
  for (size_t i = 0; i < ops_.size(); ++i) {
    mlir::Operation *op = ops_[i];
    for (mlir::Value operand : op->getOperands()) {
      auto it = rangeOf_.find(operand);
      if (it != rangeOf_.end())  // the returned logits stay live to the end of the step
        ranges_[it->second].last = mlir::isa<mlir::func::ReturnOp>(op) ? ops_.size() : i;
    }
    for (mlir::Value result : op->getResults()) {
      if (!isActivation(result))
        continue;
      if (auto fused = mlir::dyn_cast<AddRmsNormOp>(op);
          fused && result == fused.getUpdatedResidual()) {
        auto it = rangeOf_.find(fused.getResidual());
        if (it == rangeOf_.end())
          return op->emitOpError() << "residual operand is not an activation: cannot update it "
                                      "in place";
        rangeOf_[result] = it->second;
        continue;
      }
      auto type = mlir::cast<mlir::RankedTensorType>(result.getType());
      int64_t bytes = rowsAtMaxima(result) * type.getDimSize(1) *
                      storageBytes(activationStorageType(result));
      rangeOf_[result] = ranges_.size();
      ranges_.push_back({alignUp(bytes), i, i, -1});
    }
  }
  return mlir::success();
}

void PlanMemoryPass::runOnOperation() {
  auto step = getOperation().lookupSymbol<mlir::func::FuncOp>("step");
  if (!step || step.getBody().empty()) {
    getOperation().emitError() << "plan-memory needs a func.func @step with a body";
    return signalPassFailure();
  }
  if (maxTokensPerStep <= 0) {
    step.emitError() << "plan-memory needs max-tokens-per-step > 0, got "
                     << static_cast<int64_t>(maxTokensPerStep);
    return signalPassFailure();
  }
  if (maxLogitsPerStep < 0 || maxLogitsPerStep > maxTokensPerStep) {
    step.emitError() << "plan-memory needs max-logits-per-step in [0, max-tokens-per-step], got "
                     << static_cast<int64_t>(maxLogitsPerStep);
    return signalPassFailure();
  }
  mlir::Type storage = moduleActivationType(getOperation());
  if (!storage.isF32() && !storage.isF16() && !storage.isBF16()) {
    getOperation().emitError() << kActivationDtypeAttr << " must be f32, f16 or bf16, got "
                               << storage;
    return signalPassFailure();
  }
  if (failed(computeLiveRanges(step)))
    return signalPassFailure();
  // Allocate each op's new values before releasing what died at it: outputs never overlap
  // inputs. Ranges are created in op order, so a single cursor walks the definitions.
  std::vector<std::vector<size_t>> dyingAt(ops_.size() + 1);
  for (size_t r = 0; r < ranges_.size(); ++r)
    dyingAt[ranges_[r].last].push_back(r);
  Arena arena;
  size_t next = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    for (; next < ranges_.size() && ranges_[next].first == i; ++next)
      ranges_[next].offset = arena.allocate(ranges_[next].bytes);
    for (size_t r : dyingAt[i])
      arena.release(ranges_[r].offset, ranges_[r].bytes);
  }
  mlir::Builder builder(&getContext());
  for (mlir::Operation *op : ops_) {
    if (op->getNumResults() == 0 || !isActivation(op->getResult(0)))
      continue;
    llvm::SmallVector<int64_t> offsets;
    for (mlir::Value result : op->getResults()) {
      auto it = rangeOf_.find(result);
      offsets.push_back(it == rangeOf_.end() ? -1 : ranges_[it->second].offset);
    }
    op->setAttr(kArenaOffsetsAttr, builder.getDenseI64ArrayAttr(offsets));
  }
  step->setAttr(kArenaBytesAttr, builder.getI64IntegerAttr(arena.top()));
  step->setAttr(kPlannedRowsAttr,
                builder.getI64IntegerAttr(static_cast<int64_t>(maxTokensPerStep)));
  step->setAttr(kPlannedLogitsRowsAttr,
                builder.getI64IntegerAttr(maxLogitsPerStep > 0 ? maxLogitsPerStep
                                                               : maxTokensPerStep));
}

} // namespace

std::unique_ptr<mlir::Pass> createPlanMemoryPass(int64_t maxTokensPerStep,
                                                 int64_t maxLogitsPerStep) {
  return std::make_unique<PlanMemoryPass>(maxTokensPerStep, maxLogitsPerStep);
}

void registerKilnPasses() {
  mlir::PassRegistration<mlir::Pass>([] { return createFuseQkvPass(); });
  mlir::PassRegistration<mlir::Pass>([] { return createFuseGateUpPass(); });
  mlir::PassRegistration<mlir::Pass>([] { return createFuseAddRmsNormPass(); });
  mlir::PassRegistration<PlanMemoryPass>();
}

} // namespace kiln::compiler
