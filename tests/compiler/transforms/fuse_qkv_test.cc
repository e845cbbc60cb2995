// fuse-qkv: three projections become one linear over [Wq; Wk; Wv] (weights and biases, in that
// order), and rope_kv_write reads the fused value.
#include "tests/compiler/transforms/small_llama.h"

namespace kiln::compiler {
namespace {

using namespace kiln::compiler::testing;

TEST(FuseQkvTest, FusesEachLayersProjectionsInQkvOrder) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  // Per layer q, k, v, o, gate, up, down; plus lm_head.
  EXPECT_EQ(countOps<LinearOp>(*module), 2 * 7 + 1);
  int weightsBefore = countOps<WeightOp>(*module);
  ASSERT_EQ(runPasses(*module, createFuseQkvPass()), "");
  EXPECT_EQ(countOps<LinearOp>(*module), 2 * 5 + 1);
  EXPECT_EQ(countOps<WeightOp>(*module), weightsBefore - 2 * 2);
  int layer = 0;
  module->walk([&](RopeKvWriteOp rope) {
    ASSERT_EQ(rope.getQkv().size(), 1u);
    auto linear = rope.getQkv()[0].getDefiningOp<LinearOp>();
    ASSERT_TRUE(linear);
    EXPECT_EQ(opName(linear), "layers." + std::to_string(layer) + ".attn.qkv");
    EXPECT_EQ(shapeOf(linear.getResult()), (std::vector<int64_t>{mlir::ShapedType::kDynamic, 128}));
    auto weight = linear.getW().getDefiningOp<WeightOp>();
    ASSERT_TRUE(weight);
    std::string hf = "model.layers." + std::to_string(layer) + ".self_attn.";
    EXPECT_EQ(weight.getName(), "layers." + std::to_string(layer) + ".attn.qkv.weight");
    EXPECT_EQ(sourcesOf(weight),
              (std::vector<std::string>{hf + "q_proj.weight", hf + "k_proj.weight",
                                        hf + "v_proj.weight"}));
    // (4 + 2 * 2) heads of 16 rows each.
    EXPECT_EQ(shapeOf(weight.getResult()), (std::vector<int64_t>{128, 64}));
    EXPECT_FALSE(linear.getBias());
    ++layer;
  });
  EXPECT_EQ(layer, 2);
  module->walk([&](WeightOp weight) {
    EXPECT_FALSE(weight.getName().ends_with(".attn.q.weight")) << weight.getName().str();
  });
}

TEST(FuseQkvTest, FusesBiasesAndKeepsTheStoredDtype) {
  mlir::MLIRContext context;
  HfModelConfig config = smallLlamaConfig();
  config.qkvBias = config.oBias = true; // Llama's attention_bias
  auto module = buildSmallLlama(context, config, mlir::BFloat16Type::get(&context));
  ASSERT_EQ(runPasses(*module, createFuseQkvPass()), "");
  int fused = 0;
  module->walk([&](RopeKvWriteOp rope) {
    auto linear = rope.getQkv()[0].getDefiningOp<LinearOp>();
    ASSERT_TRUE(linear && linear.getBias());
    auto bias = linear.getBias().getDefiningOp<WeightOp>();
    EXPECT_EQ(shapeOf(bias.getResult()), (std::vector<int64_t>{128}));
    EXPECT_TRUE(bias.getDtype().isF32()); // biases are read as fp32
    EXPECT_EQ(sourcesOf(bias)[2],
              "model.layers." + std::to_string(fused) + ".self_attn.v_proj.bias");
    EXPECT_TRUE(linear.getW().getDefiningOp<WeightOp>().getDtype().isBF16());
    ++fused;
  });
  EXPECT_EQ(fused, 2);
}

// q projected from a different input cannot share k and v's GEMM: nothing changes.
TEST(FuseQkvTest, LeavesProjectionsOfDifferentInputsAlone) {
  mlir::MLIRContext context;
  auto module = parseModule(context, R"(
func.func @step() -> tensor<?x64xf32> {
  %ids = kiln.step_input token_ids : tensor<?xi32>
  %pos = kiln.step_input positions : tensor<?xi32>
  %slots = kiln.step_input slot_mapping : tensor<?xi32>
  %inv = kiln.constant "rope.inv_freq" {value = dense<1.0> : tensor<8xf32>} : tensor<8xf32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %h = kiln.embedding %ids, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  %h2 = kiln.silu %h : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %wq = kiln.weight "q.weight" {sources = ["q"], dtype = f32} : tensor<64x64xf32>
  %wk = kiln.weight "k.weight" {sources = ["k"], dtype = f32} : tensor<32x64xf32>
  %wv = kiln.weight "v.weight" {sources = ["v"], dtype = f32} : tensor<32x64xf32>
  %q = kiln.linear %h2, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %k = kiln.linear %h, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %v = kiln.linear %h, %wv : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %r = kiln.rope_kv_write (%q, %k, %v) %pos, %slots, %inv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, rotary_dim = 16} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32>, tensor<?xi32>, tensor<8xf32>) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
})");
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, createFuseQkvPass()), "");
  EXPECT_EQ(countOps<LinearOp>(*module), 3);
  module->walk([&](RopeKvWriteOp rope) { EXPECT_EQ(rope.getQkv().size(), 3u); });
}

TEST(FuseQkvTest, IsRegisteredAsATextualPipeline) {
  registerKilnPasses();
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  auto pm = mlir::PassManager::on<mlir::ModuleOp>(&context);
  ASSERT_TRUE(
      succeeded(mlir::parsePassPipeline("kiln-fuse-qkv,kiln-fuse-gate-up,kiln-fuse-add-rmsnorm,"
                                        "kiln-plan-memory{max-tokens-per-step=32}",
                                        pm)));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  EXPECT_EQ(countOps<LinearOp>(*module), 2 * 4 + 1);
  auto step = module->lookupSymbol<mlir::func::FuncOp>("step");
  auto planned = step->getAttrOfType<mlir::IntegerAttr>(kPlannedRowsAttr);
  ASSERT_TRUE(planned);
  EXPECT_EQ(planned.getInt(), 32);
}

} // namespace
} // namespace kiln::compiler
