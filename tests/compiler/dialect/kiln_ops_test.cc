// Verifier tests: well-formed IR parses and verifies; each shape error is rejected with a
// message naming the operand and both numbers.
#include "compiler/dialect/kiln_dialect.h"
#include "compiler/models/model_family.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

class KilnOpsTest : public ::testing::Test {
protected:
  KilnOpsTest() { loadKilnDialects(context_); }

  // Parses (and so verifies) `body` inside func @step; returns "" on success, else the errors.
  std::string check(const std::string &body, const std::string &result = "tensor<?x32xf32>") {
    std::string errors;
    mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diag) {
      errors += diag.str() + "\n";
      return mlir::success();
    });
    std::string source = "func.func @step() -> " + result + " {\n" + body + "\n}";
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, &context_);
    if (module && errors.empty())
      return "";
    return errors.empty() ? "parse failed" : errors;
  }

  mlir::MLIRContext context_;
};

constexpr const char *kInputs = R"(
  %x = kiln.step_input token_ids : tensor<?xi32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %h = kiln.embedding %x, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
)";

TEST_F(KilnOpsTest, WellFormedLinearVerifies) {
  std::string body = std::string(kInputs) + R"(
  %w = kiln.weight "w" {sources = ["a", "b"], dtype = bf16} : tensor<32x64xf32>
  %b = kiln.weight "b" {sources = ["c"], dtype = f32} : tensor<32xf32>
  %y = kiln.linear %h, %w, %b : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>)";
  EXPECT_EQ(check(body), "");
}

TEST_F(KilnOpsTest, LinearInFeaturesMustMatchWeightDim1) {
  std::string body = std::string(kInputs) + R"(
  %w = kiln.weight "w" {sources = ["a"], dtype = f32} : tensor<32x48xf32>
  %y = kiln.linear %h, %w : (tensor<?x64xf32>, tensor<32x48xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>)";
  {
    std::string errors = check(body);
    EXPECT_NE(errors.find("in-features of x (64) must equal weight dim 1 (48)"), std::string::npos)
        << errors;
  }
}

TEST_F(KilnOpsTest, LinearBiasMustMatchOutFeatures) {
  std::string body = std::string(kInputs) + R"(
  %w = kiln.weight "w" {sources = ["a"], dtype = f32} : tensor<32x64xf32>
  %b = kiln.weight "b" {sources = ["c"], dtype = f32} : tensor<16xf32>
  %y = kiln.linear %h, %w, %b : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>)";
  std::string errors = check(body);
  EXPECT_NE(errors.find("bias size 16 must equal weight dim 0 (32)"), std::string::npos) << errors;
}

TEST_F(KilnOpsTest, LinearResultWidthMustMatchWeightDim0) {
  std::string body = std::string(kInputs) + R"(
  %w = kiln.weight "w" {sources = ["a"], dtype = f32} : tensor<16x64xf32>
  %y = kiln.linear %h, %w : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>)";
  std::string errors = check(body);
  EXPECT_NE(errors.find("result width 32 must equal weight dim 0 (16)"), std::string::npos)
      << errors;
}

TEST_F(KilnOpsTest, WeightDtypeMustBeAFloatStorageType) {
  std::string body = R"(
  %w = kiln.weight "w" {sources = ["a"], dtype = i8} : tensor<32x64xf32>
  %x = kiln.step_input token_ids : tensor<?xi32>
  %h = kiln.embedding %x, %w : (tensor<?xi32>, tensor<32x64xf32>) -> tensor<?x64xf32>
  return %h : tensor<?x64xf32>)";
  std::string errors = check(body, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("'w' dtype must be f32, f16 or bf16, got 'i8'"), std::string::npos)
      << errors;
}

constexpr const char *kRopeInputs = R"(
  %pos = kiln.step_input positions : tensor<?xi32>
  %slots = kiln.step_input slot_mapping : tensor<?xi32>
  %inv = kiln.constant "rope.inv_freq" {value = dense<1.0> : tensor<8xf32>} : tensor<8xf32>
)";

// H = 4, KV = 2, D = 16: fused qkv width (4 + 2 * 2) * 16 = 128.
TEST_F(KilnOpsTest, RopeKvWriteChecksFusedQkvWidth) {
  std::string ok = std::string(kInputs) + kRopeInputs + R"(
  %w = kiln.weight "qkv" {sources = ["q", "k", "v"], dtype = f32} : tensor<128x64xf32>
  %qkv = kiln.linear %h, %w : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %q = kiln.rope_kv_write (%qkv) %pos, %slots, %inv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, rotary_dim = 16} : (tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %q : tensor<?x64xf32>)";
  EXPECT_EQ(check(ok, "tensor<?x64xf32>"), "");

  std::string bad = std::string(kInputs) + kRopeInputs + R"(
  %w = kiln.weight "qkv" {sources = ["q", "k", "v"], dtype = f32} : tensor<96x64xf32>
  %qkv = kiln.linear %h, %w : (tensor<?x64xf32>, tensor<96x64xf32>) -> tensor<?x96xf32>
  %q = kiln.rope_kv_write (%qkv) %pos, %slots, %inv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, rotary_dim = 16} : (tensor<?x96xf32>, tensor<?xi32>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %q : tensor<?x64xf32>)";
  std::string errors = check(bad, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("qkv width 96 must equal (num_heads + 2 * num_kv_heads) * head_dim (128)"),
            std::string::npos)
      << errors;
}

TEST_F(KilnOpsTest, RopeKvWriteChecksUnfusedKWidthAndInvFreq) {
  std::string bad = std::string(kInputs) + kRopeInputs + R"(
  %wq = kiln.weight "q" {sources = ["q"], dtype = f32} : tensor<64x64xf32>
  %wk = kiln.weight "k" {sources = ["k"], dtype = f32} : tensor<64x64xf32>
  %q0 = kiln.linear %h, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %k0 = kiln.linear %h, %wk : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %q = kiln.rope_kv_write (%q0, %k0, %k0) %pos, %slots, %inv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, rotary_dim = 16} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %q : tensor<?x64xf32>)";
  std::string errors = check(bad, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("k width 64 must equal num_kv_heads * head_dim (32)"), std::string::npos)
      << errors;

  std::string badInvFreq = std::string(kInputs) + kRopeInputs + R"(
  %w = kiln.weight "qkv" {sources = ["q"], dtype = f32} : tensor<128x64xf32>
  %qkv = kiln.linear %h, %w : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %q = kiln.rope_kv_write (%qkv) %pos, %slots, %inv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, rotary_dim = 8} : (tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %q : tensor<?x64xf32>)";
  errors = check(badInvFreq, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("inv_freq size 8 must equal rotary_dim / 2 (4)"), std::string::npos)
      << errors;
}

TEST_F(KilnOpsTest, AttentionRejectsHeadsNotAMultipleOfKvHeads) {
  std::string bad = std::string(kInputs) + R"(
  %pos = kiln.step_input positions : tensor<?xi32>
  %qsl = kiln.step_input query_start_loc : tensor<?xi32>
  %ctx = kiln.step_input context_lens : tensor<?xi32>
  %bt = kiln.step_input block_tables : tensor<?x?xi32>
  %o = kiln.attention %h, %pos, %qsl, %ctx, %bt {layer = 0, num_heads = 4, num_kv_heads = 3, head_dim = 16, scale = 0.25 : f32} : (tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi32>) -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>)";
  std::string errors = check(bad, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("num_heads (4) must be a multiple of num_kv_heads (3)"), std::string::npos)
      << errors;
}

TEST_F(KilnOpsTest, NormsCheckWeightSizeAndSiluMulHalvesWidth) {
  std::string badNorm = std::string(kInputs) + R"(
  %w = kiln.weight "n" {sources = ["n"], dtype = f32} : tensor<32xf32>
  %y = kiln.rms_norm %h, %w {eps = 1.0e-5 : f32} : (tensor<?x64xf32>, tensor<32xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>)";
  std::string errors = check(badNorm, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("weight size 32 must equal x's width 64"), std::string::npos) << errors;

  std::string badSiluMul = std::string(kInputs) + R"(
  %y = kiln.silu_mul %h : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>)";
  errors = check(badSiluMul, "tensor<?x64xf32>");
  EXPECT_NE(errors.find("result width 64 must equal half the gate_up width (32)"),
            std::string::npos)
      << errors;
}

// Qwen2-MoE's shared-expert gate: w is one [1, n] row; a, b and x share the result's type.
TEST_F(KilnOpsTest, SigmoidGatedAddChecksTheGateRowAndOperandTypes) {
  auto body = [](const std::string &wType, const std::string &bWidth) {
    const std::string bType = "tensor<?x" + bWidth + "xf32>";
    return std::string(kInputs) +
           "  %w = kiln.weight \"g\" {sources = [\"g\"], dtype = f32} : " + wType +
           "\n  %t = kiln.weight \"t\" {sources = [\"t\"], dtype = f32} : tensor<100x" + bWidth +
           "xf32>\n  %b = kiln.embedding %x, %t : (tensor<?xi32>, tensor<100x" + bWidth +
           "xf32>) -> " + bType +
           "\n  %y = kiln.sigmoid_gated_add %h, %b, %h, %w : (tensor<?x64xf32>, " + bType +
           ", tensor<?x64xf32>, " + wType + ") -> tensor<?x64xf32>\n  return %y : tensor<?x64xf32>";
  };
  EXPECT_EQ(check(body("tensor<1x64xf32>", "64"), "tensor<?x64xf32>"), "");
  std::string errors = check(body("tensor<2x64xf32>", "64"), "tensor<?x64xf32>");
  EXPECT_NE(errors.find("w must be [1, 64], got 'tensor<2x64xf32>'"), std::string::npos) << errors;
  errors = check(body("tensor<1x64xf32>", "32"), "tensor<?x64xf32>");
  EXPECT_NE(errors.find("a, b and x must have the result's type"), std::string::npos) << errors;
}

TEST_F(KilnOpsTest, ActivationsNeedDynamicRows) {
  std::string bad = R"(
  %x = kiln.step_input token_ids : tensor<?xi32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %h = kiln.embedding %x, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<8x64xf32>
  return %h : tensor<8x64xf32>)";
  std::string errors = check(bad, "tensor<8x64xf32>");
  EXPECT_NE(errors.find("result must be a [?, n] tensor (dynamic rows, static width)"),
            std::string::npos)
      << errors;
}

TEST_F(KilnOpsTest, BuiltLlamaVerifiesAndRowsFlowToLogits) {
  HfModelConfig config;
  config.modelType = "llama";
  config.vocabSize = 100;
  config.hiddenSize = 64;
  config.intermediateSize = 96;
  config.numLayers = 1;
  config.numHeads = 4;
  config.numKvHeads = 2;
  config.headDim = 16;
  BuildOptions options{mlir::Float32Type::get(&context_)};
  auto module = llamaFamily().build(context_, config, options);
  ASSERT_TRUE(succeeded(module));
  auto step = (*module)->lookupSymbol<mlir::func::FuncOp>("step");
  ASSERT_TRUE(step);
  int gathers = 0;
  step.walk([&](mlir::Operation *op) {
    if (auto gather = mlir::dyn_cast<GatherRowsOp>(op)) {
      ++gathers;
      EXPECT_EQ(rowsOf(gather.getResult()), Rows::kLogits);
      EXPECT_EQ(rowsOf(gather.getX()), Rows::kTokens);
    }
    if (auto weight = mlir::dyn_cast<WeightOp>(op))
      EXPECT_FALSE(isActivation(weight.getResult()));
  });
  EXPECT_EQ(gathers, 1);
}

} // namespace
} // namespace kiln::compiler
