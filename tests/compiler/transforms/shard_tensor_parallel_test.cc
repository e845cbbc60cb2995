// shard-tensor-parallel: each rank's weights are the documented slices of the checkpoint tensors
// (heads, intermediate, vocab), collectives follow the row-parallel linears and lm_head, and the
// fusion passes keep the shards; non-divisible counts fail naming the config field and --tp.
#include "compiler/dialect/source_slice.h"
#include "tests/compiler/transforms/small_llama.h"

namespace kiln::compiler {
namespace {

using namespace kiln::compiler::testing;

constexpr int64_t kDyn = mlir::ShapedType::kDynamic;

std::map<std::string, WeightOp> weightsByName(mlir::ModuleOp module) {
  std::map<std::string, WeightOp> weights;
  module.walk([&](WeightOp w) { weights[w.getName().str()] = w; });
  return weights;
}

// Weight `name` reads exactly `source` (a slice of a checkpoint tensor) and has `shape`.
void expectSlice(std::map<std::string, WeightOp> &weights, const std::string &name,
                 const std::string &source, const std::vector<int64_t> &shape) {
  ASSERT_TRUE(weights.count(name)) << name;
  EXPECT_EQ(sourcesOf(weights[name]), std::vector<std::string>{source}) << name;
  EXPECT_EQ(shapeOf(weights[name].getResult()), shape) << name;
}

TEST(SourceSliceTest, FormatsAndParsesRoundTrip) {
  SourceSlice slice{"model.layers.0.mlp.down_proj.weight", 0, -1, 48, 96};
  EXPECT_EQ(formatSourceSlice(slice), "model.layers.0.mlp.down_proj.weight|cols=48:96");
  auto parsed = parseSourceSlice("lm_head.weight|rows=50:100|cols=0:8");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->tensor, "lm_head.weight");
  EXPECT_EQ(parsed->rowBegin, 50);
  EXPECT_EQ(parsed->rowEnd, 100);
  EXPECT_EQ(parsed->colEnd, 8);
  EXPECT_FALSE(parseSourceSlice("model.norm.weight")->sliced());
  // Gemma's (1 + w) norm weights: a flag, not a slice, kept through composition.
  auto plusOne = parseSourceSlice("model.norm.weight|plus_one");
  ASSERT_TRUE(plusOne);
  EXPECT_TRUE(plusOne->plusOne);
  EXPECT_FALSE(plusOne->sliced());
  EXPECT_EQ(formatSourceSlice(*plusOne), "model.norm.weight|plus_one");
  SourceSlice rows{"q.weight", 4, 8};
  EXPECT_TRUE(composeSourceSlices(*plusOne, rows)->plusOne);
  // An encoder's token type rows less type 0's: the row is subtracted, not added.
  auto lessRow = parseSourceSlice("tt.weight|sub_row=tt.weight@0");
  ASSERT_TRUE(lessRow);
  EXPECT_TRUE(lessRow->subtractRow);
  EXPECT_EQ(lessRow->addRowTensor, "tt.weight");
  EXPECT_EQ(formatSourceSlice(*lessRow), "tt.weight|sub_row=tt.weight@0");
  EXPECT_TRUE(composeSourceSlices(*lessRow, rows)->subtractRow);
  EXPECT_FALSE(parseSourceSlice("w|add_row=t@1")->subtractRow);
  for (const char *bad :
       {"", "|rows=0:1", "t|rows=4:2", "t|rows=a:b", "t|depth=0:1", "t|rows=1", "t|sub_row=t"})
    EXPECT_FALSE(parseSourceSlice(bad)) << bad;
  std::string error;
  // Rows past the end are padding; columns past the end are an error.
  auto shape = slicedShape(*parseSourceSlice("t|rows=90:102"), {100, 64}, error);
  ASSERT_TRUE(shape);
  EXPECT_EQ(*shape, (std::vector<int64_t>{12, 64}));
  EXPECT_FALSE(slicedShape(*parseSourceSlice("t|cols=60:70"), {100, 64}, error));
  EXPECT_NE(error.find("outside its 64 columns"), std::string::npos) << error;
  EXPECT_FALSE(slicedShape(*parseSourceSlice("t|cols=0:2"), {100}, error));
}

TEST(ShardTensorParallelTest, RankOneOfTwoHoldsItsHeadsIntermediateAndVocabShard) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig()); // 4/2 heads of 16, I 96, V 100
  ASSERT_EQ(runPasses(*module, createShardTensorParallelPass(1, 2)), "");
  auto weights = weightsByName(*module);
  const std::string hf = "model.layers.0.";
  auto expectWeight = [&](const std::string &name, const std::string &source,
                          std::vector<int64_t> shape) {
    expectSlice(weights, name, source, shape);
  };
  expectWeight("layers.0.attn.q.weight", hf + "self_attn.q_proj.weight|rows=32:64", {32, 64});
  expectWeight("layers.0.attn.k.weight", hf + "self_attn.k_proj.weight|rows=16:32", {16, 64});
  expectWeight("layers.0.attn.v.weight", hf + "self_attn.v_proj.weight|rows=16:32", {16, 64});
  expectWeight("layers.0.attn.o.weight", hf + "self_attn.o_proj.weight|cols=32:64", {64, 32});
  expectWeight("layers.0.mlp.gate.weight", hf + "mlp.gate_proj.weight|rows=48:96", {48, 64});
  expectWeight("layers.0.mlp.up.weight", hf + "mlp.up_proj.weight|rows=48:96", {48, 64});
  expectWeight("layers.0.mlp.down.weight", hf + "mlp.down_proj.weight|cols=48:96", {64, 48});
  // Tied: the embedding and lm_head share one vocab shard of the table, stored once.
  expectWeight("embed.weight", "model.embed_tokens.weight|rows=50:100", {50, 64});
  EXPECT_EQ(weights.count("lm_head.weight"), 0u);
  int embeddings = 0;
  module->walk([&](EmbeddingOp embedding) {
    ++embeddings;
    EXPECT_EQ(embedding.getVocabStart(), 50);
    EXPECT_EQ(embedding.getTable(), weights["embed.weight"].getResult());
    ASSERT_TRUE(embedding->hasOneUse());
    auto reduce = mlir::dyn_cast<AllReduceOp>(*embedding->getUsers().begin());
    ASSERT_TRUE(reduce);
    EXPECT_EQ(opName(reduce), opName(embedding) + ".all_reduce");
  });
  EXPECT_EQ(embeddings, 1);
  module->walk([&](LinearOp linear) {
    if (opName(linear) == "lm_head")
      EXPECT_EQ(linear.getW(), weights["embed.weight"].getResult());
  });
  expectWeight("layers.0.attn_norm.weight", hf + "input_layernorm.weight", {64});
  module->walk([&](RopeKvWriteOp rope) {
    EXPECT_EQ(rope.getNumHeads(), 2);
    EXPECT_EQ(rope.getNumKvHeads(), 1);
  });
  module->walk([&](AttentionOp attention) {
    EXPECT_EQ(attention.getNumHeads(), 2);
    EXPECT_EQ(attention.getNumKvHeads(), 1);
    EXPECT_EQ(shapeOf(attention.getResult()), (std::vector<int64_t>{kDyn, 32}));
  });
  // One all_reduce after each o_proj and down_proj, feeding the residual add.
  EXPECT_EQ(countOps<AllReduceOp>(*module), 5);
  module->walk([&](AllReduceOp reduce) {
    if (reduce.getX().getDefiningOp<EmbeddingOp>())
      return;
    auto linear = reduce.getX().getDefiningOp<LinearOp>();
    ASSERT_TRUE(linear);
    EXPECT_TRUE(opName(linear).ends_with(".o") || opName(linear).ends_with(".down"));
    EXPECT_EQ(opName(reduce), opName(linear) + ".all_reduce");
    ASSERT_TRUE(reduce->hasOneUse());
    EXPECT_TRUE(mlir::isa<AddOp>(*reduce->getUsers().begin()));
  });
  EXPECT_EQ(countOps<AllGatherOp>(*module), 1);
  auto step = module->lookupSymbol<mlir::func::FuncOp>("step");
  mlir::Value logits = step.getBody().front().getTerminator()->getOperand(0);
  auto gather = logits.getDefiningOp<AllGatherOp>();
  ASSERT_TRUE(gather);
  EXPECT_EQ(shapeOf(gather.getResult()), (std::vector<int64_t>{kDyn, 100}));
  EXPECT_EQ(shapeOf(gather.getX()), (std::vector<int64_t>{kDyn, 50}));
}

// Qwen2-MoE's shared expert: sharded over its intermediate dim like a dense MLP, its gate row
// replicated, and one all_reduce per layer after the sigmoid_gated_add (routed + gated shared
// partial sums reduce together; the gate is the same on every rank).
TEST(ShardTensorParallelTest, SharedExpertShardsLikeAnMlpAndReducesOnceWithTheExperts) {
  mlir::MLIRContext context;
  HfModelConfig config = smallLlamaConfig();
  config.numExperts = 4;
  config.expertsPerToken = 2;
  config.expertIntermediate = 32;
  config.sharedExpertIntermediate = 48;
  auto module = buildSmallLlama(context, config);
  ASSERT_EQ(runPasses(*module, createShardTensorParallelPass(1, 2)), "");
  auto weights = weightsByName(*module);
  const std::string hf = "model.layers.1.mlp.";
  auto expectWeight = [&](const std::string &name, const std::string &source,
                          std::vector<int64_t> shape) {
    expectSlice(weights, name, source, shape);
  };
  expectWeight("layers.1.moe.shared.gate.weight", hf + "shared_expert.gate_proj.weight|rows=24:48",
               {24, 64});
  expectWeight("layers.1.moe.shared.up.weight", hf + "shared_expert.up_proj.weight|rows=24:48",
               {24, 64});
  expectWeight("layers.1.moe.shared.down.weight", hf + "shared_expert.down_proj.weight|cols=24:48",
               {64, 24});
  expectWeight("layers.1.moe.shared_gate.weight", hf + "shared_expert_gate.weight", {1, 64});
  // The embedding's, each o_proj's and one per MoE layer.
  EXPECT_EQ(countOps<AllReduceOp>(*module), 5);
  int adds = 0;
  module->walk([&](SigmoidGatedAddOp add) {
    ++adds;
    EXPECT_TRUE(add.getA().getDefiningOp<MoeExpertsOp>());
    EXPECT_TRUE(add.getB().getDefiningOp<LinearOp>());
    ASSERT_TRUE(add->hasOneUse());
    auto reduce = mlir::dyn_cast<AllReduceOp>(*add->getUsers().begin());
    ASSERT_TRUE(reduce);
    EXPECT_EQ(opName(reduce), opName(add) + ".all_reduce");
  });
  EXPECT_EQ(adds, 2);
}

TEST(ShardTensorParallelTest, FusionKeepsShardsAndTheLastVocabShardIsPadded) {
  mlir::MLIRContext context;
  HfModelConfig config = smallLlamaConfig();
  config.numHeads = 8;
  config.numKvHeads = 4;
  config.headDim = 8;
  config.vocabSize = 102; // 4 shards of 26 rows: the last holds 24 real rows + 2 zero rows
  config.tieWordEmbeddings = false;
  auto module = buildSmallLlama(context, config);
  ASSERT_EQ(runPasses(*module, createShardTensorParallelPass(3, 4), createFuseQkvPass(),
                      createFuseGateUpPass(), createFuseAddRmsNormPass(), createPlanMemoryPass(16)),
            "");
  auto weights = weightsByName(*module);
  const std::string hf = "model.layers.1.";
  ASSERT_TRUE(weights.count("layers.1.attn.qkv.weight"));
  EXPECT_EQ(sourcesOf(weights["layers.1.attn.qkv.weight"]),
            (std::vector<std::string>{hf + "self_attn.q_proj.weight|rows=48:64",
                                      hf + "self_attn.k_proj.weight|rows=24:32",
                                      hf + "self_attn.v_proj.weight|rows=24:32"}));
  EXPECT_EQ(shapeOf(weights["layers.1.attn.qkv.weight"].getResult()),
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(sourcesOf(weights["layers.1.mlp.gate_up.weight"]),
            (std::vector<std::string>{hf + "mlp.gate_proj.weight|rows=72:96",
                                      hf + "mlp.up_proj.weight|rows=72:96"}));
  EXPECT_EQ(sourcesOf(weights["lm_head.weight"]),
            std::vector<std::string>{"lm_head.weight|rows=78:104"});
  // Untied: the embedding's own table is sharded over the same vocab rows.
  EXPECT_EQ(sourcesOf(weights["embed.weight"]),
            std::vector<std::string>{"model.embed_tokens.weight|rows=78:104"});
  EXPECT_EQ(shapeOf(weights["embed.weight"].getResult()), (std::vector<int64_t>{26, 64}));
  module->walk([&](EmbeddingOp embedding) { EXPECT_EQ(embedding.getVocabStart(), 78); });
  EXPECT_EQ(countOps<AllReduceOp>(*module), 5);
  EXPECT_EQ(countOps<AddRmsNormOp>(*module), 4); // the residual adds still fuse after a reduce
}

TEST(ShardTensorParallelTest, BiasOfARowParallelLinearIsAddedByRankZeroOnly) {
  for (int64_t rank : {0, 1}) {
    mlir::MLIRContext context;
    HfModelConfig config = smallLlamaConfig();
    config.qkvBias = config.oBias = true; // Llama's attention_bias
    auto module = buildSmallLlama(context, config);
    ASSERT_EQ(runPasses(*module, createShardTensorParallelPass(rank, 2)), "");
    auto weights = weightsByName(*module);
    EXPECT_EQ(weights.count("layers.0.attn.o.bias"), rank == 0 ? 1u : 0u) << rank;
    ASSERT_TRUE(weights.count("layers.0.attn.q.bias"));
    EXPECT_EQ(sourcesOf(weights["layers.0.attn.q.bias"]),
              std::vector<std::string>{"model.layers.0.self_attn.q_proj.bias|rows=" +
                                       std::string(rank == 0 ? "0:32" : "32:64")});
  }
}

TEST(ShardTensorParallelTest, NonDivisibleCountsNameTheFieldAndTp) {
  struct Case {
    int64_t heads, kvHeads, intermediate, tp;
    std::string message;
  };
  for (const Case &c : {Case{4, 1, 96, 2, "--tp 2 does not divide num_key_value_heads (1)"},
                        Case{4, 2, 96, 4, "--tp 4 does not divide num_key_value_heads (2)"},
                        Case{6, 6, 96, 4, "--tp 4 does not divide num_attention_heads (6)"},
                        Case{4, 2, 90, 4, "--tp 4 does not divide num_key_value_heads (2)"},
                        Case{4, 4, 90, 4, "--tp 4 does not divide intermediate_size (90)"}}) {
    mlir::MLIRContext context;
    HfModelConfig config = smallLlamaConfig();
    config.numHeads = c.heads;
    config.numKvHeads = c.kvHeads;
    config.intermediateSize = c.intermediate;
    auto module = buildSmallLlama(context, config);
    std::string errors = runPasses(*module, createShardTensorParallelPass(0, c.tp));
    EXPECT_NE(errors.find(c.message), std::string::npos) << errors;
  }
}

TEST(ShardTensorParallelTest, RefusesAFusedGraphAndIsANoOpAtTpOne) {
  mlir::MLIRContext context;
  auto module = buildSmallLlama(context, smallLlamaConfig());
  std::string before;
  llvm::raw_string_ostream(before) << *module;
  ASSERT_EQ(runPasses(*module, createShardTensorParallelPass(0, 1)), "");
  std::string after;
  llvm::raw_string_ostream(after) << *module;
  EXPECT_EQ(before, after);
  ASSERT_EQ(runPasses(*module, createFuseQkvPass()), "");
  std::string errors = runPasses(*module, createShardTensorParallelPass(0, 2));
  EXPECT_NE(errors.find("before the fusion passes"), std::string::npos) << errors;
  EXPECT_NE(runPasses(*module, createShardTensorParallelPass(2, 2)).find("is not in [0, tp 2)"),
            std::string::npos);
}

} // namespace
} // namespace kiln::compiler
