// fuse-add-rmsnorm: every residual add followed by a norm of its sum becomes add_rms_norm, and
// the residual stream threads through the updated-residual results.
#include "tests/compiler/transforms/small_llama.h"

namespace kiln::compiler {
namespace {

using namespace kiln::compiler::testing;

TEST(FuseAddRmsNormTest, ThreadsTheResidualStreamThroughFusedOps) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  EXPECT_EQ(countOps<AddOp>(*module), 4);
  EXPECT_EQ(countOps<RmsNormOp>(*module), 5);
  ASSERT_EQ(runPasses(*module, createFuseAddRmsNormPass()), "");
  EXPECT_EQ(countOps<AddOp>(*module), 0);
  EXPECT_EQ(countOps<RmsNormOp>(*module), 1);  // layer 0's input norm has no add before it
  EXPECT_EQ(countOps<AddRmsNormOp>(*module), 4);

  std::vector<AddRmsNormOp> fused;
  module->walk([&](AddRmsNormOp op) { fused.push_back(op); });
  ASSERT_EQ(fused.size(), 4u);
  EXPECT_TRUE(fused[0].getResidual().getDefiningOp<EmbeddingOp>());
  for (size_t i = 1; i < fused.size(); ++i)
    EXPECT_EQ(fused[i].getResidual(), fused[i - 1].getUpdatedResidual()) << i;
  // x is the sublayer output: attention's o projection, then the mlp's down projection.
  EXPECT_EQ(opName(fused[0].getX().getDefiningOp()), "layers.0.attn.o");
  EXPECT_EQ(opName(fused[1].getX().getDefiningOp()), "layers.0.mlp.down");
  EXPECT_EQ(opName(fused[3]), "final_norm");
  EXPECT_FLOAT_EQ(fused[3].getEps().convertToFloat(), 1e-5f);
  module->walk([&](GatherRowsOp gather) { EXPECT_EQ(gather.getX(), fused[3].getNormed()); });
  // The last residual is dead after the final norm.
  EXPECT_TRUE(fused[3].getUpdatedResidual().use_empty());
}

// Updating %a in place would corrupt its later reader, so the other operand becomes the
// residual; when both are read later, nothing is fused.
TEST(FuseAddRmsNormTest, NeverUpdatesAValueThatIsReadLater) {
  mlir::MLIRContext context;
  auto module = parseModule(context, R"(
func.func @step() -> tensor<?x64xf32> {
  %ids = kiln.step_input token_ids : tensor<?xi32>
  %table = kiln.weight "embed.weight" {sources = ["e"], dtype = f32} : tensor<100x64xf32>
  %a = kiln.embedding %ids, %table : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  %b = kiln.silu %a : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %w = kiln.weight "norm.weight" {sources = ["n"], dtype = f32} : tensor<64xf32>
  %s = kiln.add %a, %b : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %n = kiln.rms_norm %s, %w {eps = 1.0e-5 : f32} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %late = kiln.add %a, %n : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %c = kiln.silu %late : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %s2 = kiln.add %late, %c : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %n2 = kiln.rms_norm %s2, %w {eps = 1.0e-5 : f32} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %r = kiln.add %n2, %late : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %r2 = kiln.add %r, %c : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %r2 : tensor<?x64xf32>
})");
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, createFuseAddRmsNormPass()), "");
  std::vector<AddRmsNormOp> fused;
  module->walk([&](AddRmsNormOp op) { fused.push_back(op); });
  // First pair: %a is read later, %b is not -> %b is updated in place. Second pair: both %late
  // and %c are read later -> left unfused.
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_TRUE(fused[0].getResidual().getDefiningOp<SiluOp>());
  EXPECT_TRUE(fused[0].getX().getDefiningOp<EmbeddingOp>());
  EXPECT_EQ(countOps<RmsNormOp>(*module), 1);
}

} // namespace
} // namespace kiln::compiler
