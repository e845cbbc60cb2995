// plan-memory: recompute every activation's live range independently and check the assigned
// arena ranges: no two values live at the same time share a byte, offsets are 256-aligned,
// add_rms_norm updates its residual in place, and reuse makes the arena smaller than the sum.
#include "compiler/emit/activation_dtype.h"
#include "tests/compiler/transforms/small_llama.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

using namespace kiln::compiler::testing;

struct Placed {
  std::string name;
  int64_t offset = 0;
  int64_t bytes = 0;
  size_t first = 0;
  size_t last = 0;
};

constexpr int64_t kRows = 64;

// One entry per buffer: an updated residual extends its operand's entry instead of adding one.
// Activations take `elementBytes` (the module's --dtype), the returned logits always 4 (fp32).
// Values downstream of gather_rows (the logits rows) take `logitsRows` rows, the rest kRows.
std::vector<Placed> placedBuffers(mlir::func::FuncOp step, int64_t elementBytes = 4,
                                  int64_t logitsRows = kRows) {
  std::vector<mlir::Operation *> ops;
  for (mlir::Operation &op : step.getBody().front())
    ops.push_back(&op);
  llvm::DenseMap<mlir::Value, size_t> entryOf;
  std::vector<Placed> placed;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (mlir::Value operand : ops[i]->getOperands())
      if (entryOf.count(operand))
        placed[entryOf[operand]].last = mlir::isa<mlir::func::ReturnOp>(ops[i]) ? ops.size() : i;
    auto offsets = ops[i]->getAttrOfType<mlir::DenseI64ArrayAttr>(kArenaOffsetsAttr);
    for (unsigned r = 0; r < ops[i]->getNumResults(); ++r) {
      mlir::Value result = ops[i]->getResult(r);
      if (!isActivation(result))
        continue;
      EXPECT_TRUE(offsets) << opName(ops[i]);
      if (!offsets)
        continue;
      if (auto fused = mlir::dyn_cast<AddRmsNormOp>(ops[i]); fused && r == 0) {
        size_t entry = entryOf.lookup(fused.getResidual());
        EXPECT_EQ(offsets[0], placed[entry].offset) << "residual must be updated in place";
        entryOf[result] = entry;
        continue;
      }
      int64_t width = mlir::cast<mlir::RankedTensorType>(result.getType()).getDimSize(1);
      bool returned = llvm::any_of(result.getUsers(), [](mlir::Operation *user) {
        return mlir::isa<mlir::func::ReturnOp>(user);
      });
      const int64_t rows = rowsOf(result) == Rows::kLogits ? logitsRows : kRows;
      entryOf[result] = placed.size();
      placed.push_back(
          {opName(ops[i]), offsets[r], rows * width * (returned ? 4 : elementBytes), i, i});
    }
  }
  return placed;
}

void checkPlan(mlir::ModuleOp module, int64_t elementBytes = 4, int64_t logitsRows = kRows) {
  auto step = module.lookupSymbol<mlir::func::FuncOp>("step");
  int64_t arena = step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr).getInt();
  std::vector<Placed> placed = placedBuffers(step, elementBytes, logitsRows);
  ASSERT_FALSE(placed.empty());
  int64_t sum = 0;
  for (const Placed &p : placed) {
    EXPECT_EQ(p.offset % kArenaAlignment, 0) << p.name;
    EXPECT_LE(p.offset + p.bytes, arena) << p.name;
    sum += p.bytes;
  }
  for (size_t a = 0; a < placed.size(); ++a)
    for (size_t b = a + 1; b < placed.size(); ++b) {
      const Placed &x = placed[a], &y = placed[b];
      bool liveTogether = x.first <= y.last && y.first <= x.last;
      bool shareBytes = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      EXPECT_FALSE(liveTogether && shareBytes)
          << x.name << " [" << x.offset << ", +" << x.bytes << ") ops " << x.first << "-" << x.last
          << " overlaps " << y.name << " [" << y.offset << ", +" << y.bytes << ") ops " << y.first
          << "-" << y.last;
    }
  EXPECT_LT(arena, sum) << "no buffer was reused";
}

TEST(PlanMemoryTest, FusedLlamaPlanHasNoLiveOverlapAndReusesMemory) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  ASSERT_EQ(runPasses(*module, createFuseQkvPass(), createFuseGateUpPass(),
                      createFuseAddRmsNormPass(), createPlanMemoryPass(kRows)),
            "");
  checkPlan(*module);
  // Peak: the residual stream + a [64, 192] gate_up (+ the [64, 96] silu_mul it feeds) is the
  // widest moment; the plan must be close to that, far below the ~30 values' sum.
  auto step = module->lookupSymbol<mlir::func::FuncOp>("step");
  int64_t arena = step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr).getInt();
  EXPECT_LE(arena, kRows * 4 * (64 + 64 + 192 + 96 + 100));
}

TEST(PlanMemoryTest, UnfusedGraphPlansToo) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  ASSERT_EQ(runPasses(*module, createPlanMemoryPass(kRows)), "");
  checkPlan(*module);
}

TEST(PlanMemoryTest, LogitsStayLiveToTheEnd) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  ASSERT_EQ(runPasses(*module, createFuseQkvPass(), createFuseGateUpPass(),
                      createFuseAddRmsNormPass(), createPlanMemoryPass(kRows)),
            "");
  auto step = module->lookupSymbol<mlir::func::FuncOp>("step");
  std::vector<Placed> placed = placedBuffers(step);
  auto logits = std::find_if(placed.begin(), placed.end(),
                             [](const Placed &p) { return p.name == "lm_head"; });
  ASSERT_NE(logits, placed.end());
  EXPECT_EQ(logits->bytes, kRows * 100 * 4);
  EXPECT_EQ(logits->last, step.getBody().front().getOperations().size());
}

int64_t arenaOf(mlir::ModuleOp module) {
  auto step = module.lookupSymbol<mlir::func::FuncOp>("step");
  return step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr).getInt();
}

// --dtype bf16/fp16: the builder marks the module (kiln.activation_dtype) and every activation but
// the fp32 logits is planned at 2 bytes an element; with the same liveness the arena shrinks.
TEST(PlanMemoryTest, HalfActivationsArePlannedAtTheirSize) {
  mlir::MLIRContext context;
  auto f32 = buildSmallLlama(context, smallLlamaConfig());
  ASSERT_EQ(runPasses(*f32, createFuseQkvPass(), createFuseGateUpPass(),
                      createFuseAddRmsNormPass(), createPlanMemoryPass(kRows)),
            "");
  for (mlir::Type type : {mlir::Type(mlir::BFloat16Type::get(&context)),
                          mlir::Type(mlir::Float16Type::get(&context))}) {
    auto half = buildSmallLlama(context, smallLlamaConfig(), type);
    ASSERT_EQ(half->getOperation()->getAttrOfType<mlir::TypeAttr>(kActivationDtypeAttr).getValue(),
              type);
    ASSERT_EQ(runPasses(*half, createFuseQkvPass(), createFuseGateUpPass(),
                        createFuseAddRmsNormPass(), createPlanMemoryPass(kRows)),
              "");
    checkPlan(*half, 2);
    // The peak is in the MLP, where no logits are live: every byte of it halves.
    EXPECT_EQ(arenaOf(*half) * 2, arenaOf(*f32));
  }
}

// A step returns logits for the rows it asks for (max_logits_per_step), not for every token: with
// a large vocabulary the [rows, vocab] fp32 logits were nearly the whole arena (SmolLM2: 402 of
// 407 MB at 2,048 tokens). Exact bytes, so any change to the sizing rule shows here.
TEST(PlanMemoryTest, LogitsArePlannedForTheLogitsRowsOnly) {
  HfModelConfig config = smallLlamaConfig();
  config.vocabSize = 8192;
  auto planWithLogitsRows = [&config](mlir::MLIRContext &context, int64_t logitsRows) {
    auto module = buildSmallLlama(context, config);
    EXPECT_EQ(runPasses(*module, createFuseQkvPass(), createFuseGateUpPass(),
                        createFuseAddRmsNormPass(), createPlanMemoryPass(kRows, logitsRows)),
              "");
    return module;
  };
  mlir::MLIRContext context;
  auto everyToken = planWithLogitsRows(context, 0); // 0: max-tokens-per-step rows, as before
  auto twoRows = planWithLogitsRows(context, 2);
  checkPlan(*everyToken, 4, kRows);
  checkPlan(*twoRows, 4, 2);
  auto bytesOf = [](mlir::ModuleOp module, const std::string &name) {
    std::vector<Placed> placed =
        placedBuffers(module.lookupSymbol<mlir::func::FuncOp>("step"), 4, 2);
    auto it = std::find_if(placed.begin(), placed.end(),
                           [&name](const Placed &p) { return p.name == name; });
    return it == placed.end() ? int64_t(-1) : it->bytes;
  };
  EXPECT_EQ(bytesOf(*twoRows, "lm_head"), 2 * 8192 * 4);
  EXPECT_EQ(bytesOf(*twoRows, "logits_rows"), 2 * 64 * 4);
  // Every token: at the lm_head only its input, the gathered [64, 64] rows, is live (at offset 0),
  // and the [64, 8192] fp32 logits go on top of it.
  EXPECT_EQ(arenaOf(*everyToken), 64 * 64 * 4 + 64 * 8192 * 4);
  // Two rows: the 64 KB of logits fit below the layers' peak, so the arena is that of the same
  // model with a 100-token vocabulary planned at 64 rows (98,304 bytes).
  auto smallVocab = buildSmallLlama(context, smallLlamaConfig());
  ASSERT_EQ(runPasses(*smallVocab, createFuseQkvPass(), createFuseGateUpPass(),
                      createFuseAddRmsNormPass(), createPlanMemoryPass(kRows)),
            "");
  EXPECT_EQ(arenaOf(*twoRows), arenaOf(*smallVocab));
  EXPECT_EQ(arenaOf(*twoRows), 98304);
}

TEST(PlanMemoryTest, RejectsLogitsRowsAboveTheTokens) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  std::string errors = runPasses(*module, createPlanMemoryPass(kRows, kRows + 1));
  EXPECT_NE(errors.find("plan-memory needs max-logits-per-step in [0, max-tokens-per-step], got 65"),
            std::string::npos)
      << errors;
}

TEST(PlanMemoryTest, RejectsANonFloatActivationDtype) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  module->getOperation()->setAttr(kActivationDtypeAttr,
                                  mlir::TypeAttr::get(mlir::IntegerType::get(&context, 8)));
  std::string errors = runPasses(*module, createPlanMemoryPass(kRows));
  EXPECT_NE(errors.find("kiln.activation_dtype must be f32, f16 or bf16, got 'i8'"),
            std::string::npos)
      << errors;
}

TEST(PlanMemoryTest, RejectsMissingMaxima) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  std::string errors = runPasses(*module, createPlanMemoryPass(0));
  EXPECT_NE(errors.find("plan-memory needs max-tokens-per-step > 0, got 0"), std::string::npos)
      << errors;
}

} // namespace
} // namespace kiln::compiler
