// fuse-gate-up: mul(silu(gate), up) becomes silu_mul over one linear whose rows are [gate; up].
#include "tests/compiler/transforms/small_llama.h"

namespace kiln::compiler {
namespace {

using namespace kiln::compiler::testing;

TEST(FuseGateUpTest, FusesEachMlpIntoOneLinearAndSiluMul) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  EXPECT_EQ(countOps<SiluOp>(*module), 2);
  EXPECT_EQ(countOps<MulOp>(*module), 2);
  ASSERT_EQ(runPasses(*module, createFuseGateUpPass()), "");
  EXPECT_EQ(countOps<SiluOp>(*module), 0);
  EXPECT_EQ(countOps<MulOp>(*module), 0);
  EXPECT_EQ(countOps<SiluMulOp>(*module), 2);
  EXPECT_EQ(countOps<LinearOp>(*module), 2 * 6 + 1);
  int layer = 0;
  module->walk([&](SiluMulOp siluMul) {
    std::string prefix = "layers." + std::to_string(layer) + ".mlp";
    EXPECT_EQ(opName(siluMul), prefix + ".silu_mul");
    EXPECT_EQ(shapeOf(siluMul.getResult()), (std::vector<int64_t>{mlir::ShapedType::kDynamic, 96}));
    auto linear = siluMul.getGateUp().getDefiningOp<LinearOp>();
    ASSERT_TRUE(linear);
    EXPECT_EQ(opName(linear), prefix + ".gate_up");
    auto weight = linear.getW().getDefiningOp<WeightOp>();
    std::string hf = "model.layers." + std::to_string(layer) + ".mlp.";
    EXPECT_EQ(weight.getName(), prefix + ".gate_up.weight");
    EXPECT_EQ(sourcesOf(weight),
              (std::vector<std::string>{hf + "gate_proj.weight", hf + "up_proj.weight"}));
    EXPECT_EQ(shapeOf(weight.getResult()), (std::vector<int64_t>{192, 64}));
    // The down projection now reads silu_mul.
    ASSERT_TRUE(siluMul->hasOneUse());
    EXPECT_EQ(opName(*siluMul->getUsers().begin()), prefix + ".down");
    ++layer;
  });
  EXPECT_EQ(layer, 2);
}

// mul(up, silu(gate)) is the same product: gate still comes first in the fused weight.
TEST(FuseGateUpTest, AcceptsSiluOnEitherSideOfTheMul) {
  mlir::MLIRContext context;
  auto module = parseModule(context, R"(
func.func @step() -> tensor<?x96xf32> {
  %ids = kiln.step_input token_ids : tensor<?xi32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %h = kiln.embedding %ids, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  %wu = kiln.weight "mlp.up.weight" {sources = ["up"], dtype = f16} : tensor<96x64xf32>
  %u = kiln.linear %h, %wu : (tensor<?x64xf32>, tensor<96x64xf32>) -> tensor<?x96xf32> loc("mlp.up")
  %wg = kiln.weight "mlp.gate.weight" {sources = ["gate"], dtype = f16} : tensor<96x64xf32>
  %g = kiln.linear %h, %wg : (tensor<?x64xf32>, tensor<96x64xf32>) -> tensor<?x96xf32> loc("mlp.gate")
  %s = kiln.silu %g : (tensor<?x96xf32>) -> tensor<?x96xf32>
  %m = kiln.mul %u, %s : (tensor<?x96xf32>, tensor<?x96xf32>) -> tensor<?x96xf32> loc("mlp.mul")
  return %m : tensor<?x96xf32>
})");
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, createFuseGateUpPass()), "");
  ASSERT_EQ(countOps<SiluMulOp>(*module), 1);
  module->walk([&](WeightOp weight) {
    if (weight.getName() == "embed.weight")
      return;
    EXPECT_EQ(weight.getName(), "mlp.gate_up.weight");
    EXPECT_EQ(sourcesOf(weight), (std::vector<std::string>{"gate", "up"}));
    EXPECT_TRUE(weight.getDtype().isF16());
  });
}

// A gate whose activation is also read elsewhere must stay: silu_mul would drop that value.
TEST(FuseGateUpTest, LeavesASiluWithOtherReadersAlone) {
  mlir::MLIRContext context;
  auto module = parseModule(context, R"(
func.func @step() -> tensor<?x96xf32> {
  %ids = kiln.step_input token_ids : tensor<?xi32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %h = kiln.embedding %ids, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  %wg = kiln.weight "gate.weight" {sources = ["gate"], dtype = f32} : tensor<96x64xf32>
  %g = kiln.linear %h, %wg : (tensor<?x64xf32>, tensor<96x64xf32>) -> tensor<?x96xf32>
  %wu = kiln.weight "up.weight" {sources = ["up"], dtype = f32} : tensor<96x64xf32>
  %u = kiln.linear %h, %wu : (tensor<?x64xf32>, tensor<96x64xf32>) -> tensor<?x96xf32>
  %s = kiln.silu %g : (tensor<?x96xf32>) -> tensor<?x96xf32>
  %m = kiln.mul %s, %u : (tensor<?x96xf32>, tensor<?x96xf32>) -> tensor<?x96xf32>
  %r = kiln.add %m, %s : (tensor<?x96xf32>, tensor<?x96xf32>) -> tensor<?x96xf32>
  return %r : tensor<?x96xf32>
})");
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, createFuseGateUpPass()), "");
  EXPECT_EQ(countOps<SiluMulOp>(*module), 0);
  EXPECT_EQ(countOps<LinearOp>(*module), 2);
}

} // namespace
} // namespace kiln::compiler
