// compileModel() end to end on real checkpoints: TinyStories-656K (shared assets) and the tiny
// Llama fixtures (tests/data). The artifact is loaded back with the runtime's loader (FlatBuffers
// verifier + semantic plan checks + weight hashes) and checked op by op and weight by weight.
#include "compiler/driver/compile.h"
#include "compiler/import/safetensors.h"
#include "runtime/artifact/artifact.h"
#include "runtime/base/file.h"
#include "runtime/base/half.h"
#include "schema/version.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using schema::OpParams;

std::string assetModel(const std::string &name) {
  return std::string(KILN_ASSETS_DIR) + "/models/" + name;
}
std::string fixtureModel(const std::string &name) {
  return std::string(KILN_TEST_DATA_DIR) + "/models/" + name;
}

class CompileTest : public ::testing::Test {
protected:
  void SetUp() override {
    outDir_ = fs::path(::testing::TempDir()) /
              ("kiln_compile_" +
               std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(outDir_);
  }
  void TearDown() override { fs::remove_all(outDir_); }

  CompileOptions options(const std::string &modelDir) {
    CompileOptions o;
    o.modelDir = modelDir;
    o.outDir = outDir_.string();
    o.log = &log_;
    return o;
  }
  std::unique_ptr<rt::Artifact> load() {
    auto artifact = rt::Artifact::load(outDir_.string());
    EXPECT_TRUE(artifact.isOk()) << artifact.status().toString();
    return artifact.isOk() ? std::move(artifact).value() : nullptr;
  }

  fs::path outDir_;
  std::ostringstream log_;
};

std::map<OpParams, int> opCounts(const schema::Rank &rank) {
  std::map<OpParams, int> counts;
  for (const schema::Op *op : *rank.program())
    ++counts[op->params_type()];
  return counts;
}

const schema::WeightEntry *findWeight(const schema::Rank &rank, const std::string &name) {
  for (const schema::WeightEntry *entry : *rank.weights())
    if (entry->name()->str() == name)
      return entry;
  return nullptr;
}

std::vector<uint64_t> shapeOf(const schema::WeightEntry *entry) {
  return entry ? std::vector<uint64_t>(entry->shape()->begin(), entry->shape()->end())
               : std::vector<uint64_t>{};
}

// The checkpoint tensors `names` as fp32, concatenated.
std::vector<float> checkpointRows(const std::string &modelDir, std::vector<std::string> names) {
  auto checkpoint = SafetensorsCheckpoint::open(modelDir);
  EXPECT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  std::vector<float> all;
  for (const std::string &name : names) {
    auto values = checkpoint->readF32(name);
    EXPECT_TRUE(values.isOk()) << values.status().toString();
    all.insert(all.end(), values->begin(), values->end());
  }
  return all;
}

std::vector<float> storedF32(const rt::Artifact &artifact, const std::string &name) {
  const schema::Rank &rank = artifact.rank(0);
  for (uint32_t i = 0; i < rank.weights()->size(); ++i)
    if (rank.weights()->Get(i)->name()->str() == name) {
      auto bytes = artifact.weightBytes(0, static_cast<int>(i));
      std::vector<float> values(bytes.size() / 4);
      std::memcpy(values.data(), bytes.data(), bytes.size());
      return values;
    }
  return {};
}

TEST_F(CompileTest, TinyStoriesCompilesToAVerifiedFusedPlan) {
  std::string model = assetModel("tinystories-656K-hf");
  if (!fs::exists(model))
    GTEST_SKIP() << "shared assets absent: " << model;
  ASSERT_TRUE(compileModel(options(model)).isOk()) << log_.str();

  // The raw FlatBuffers verifier, then the runtime's full load (identifier, manifest hash,
  // semantic plan checks, weight hashes).
  auto planBytes = readFile((outDir_ / kPlanFileName).string());
  ASSERT_TRUE(planBytes.isOk());
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t *>(planBytes->data()),
                                 planBytes->size());
  EXPECT_TRUE(schema::VerifyPlanBuffer(verifier));
  auto artifact = load();
  ASSERT_TRUE(artifact);
  const schema::Plan &plan = artifact->plan();
  EXPECT_EQ(plan.schema_version(), kSchemaVersion);
  EXPECT_EQ(plan.model()->vocab_size(), 2048u);
  EXPECT_EQ(plan.model()->num_kv_heads(), 4u);
  EXPECT_EQ(plan.model()->bos_token_id(), 1);
  ASSERT_EQ(plan.model()->eos_token_ids()->size(), 1u);
  EXPECT_EQ(plan.model()->eos_token_ids()->Get(0), 2);
  // Its tokenizer_config has no chat_template; FlatBuffers omits empty strings.
  EXPECT_EQ(flatbuffers::GetString(plan.model()->chat_template()), "");
  EXPECT_EQ(plan.limits()->max_batch(), 8u);
  EXPECT_EQ(plan.limits()->max_seq_len(), 512u); // min(max_position_embeddings, 4096)
  EXPECT_EQ(plan.limits()->max_tokens_per_step(), 2048u);
  EXPECT_EQ(plan.limits()->max_blocks_per_seq(), 32u); // 512 / 16
  EXPECT_EQ(plan.kv_cache()->num_layers(), 2u);
  EXPECT_EQ(plan.kv_cache()->dtype(), schema::DType::F32);
  EXPECT_EQ(plan.activation_dtype(), schema::DType::F32);
  ASSERT_EQ(plan.targets()->size(), 1u);
  EXPECT_EQ(plan.targets()->Get(0)->str(), "cpu");
  EXPECT_TRUE(fs::exists(outDir_ / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(outDir_ / "tokenizer_config.json"));

  const schema::Rank &rank = artifact->rank(0);
  std::map<OpParams, int> counts = opCounts(rank);
  EXPECT_EQ(counts[OpParams::EmbeddingParams], 1);
  EXPECT_EQ(counts[OpParams::RmsNormParams], 1);        // layer 0's input norm only
  EXPECT_EQ(counts[OpParams::AddRmsNormParams], 4);     // 2 per layer (the last feeds final_norm)
  EXPECT_EQ(counts[OpParams::LinearParams], 2 * 4 + 1); // qkv, o, gate_up, down; lm_head
  EXPECT_EQ(counts[OpParams::RopeKvWriteParams], 2);
  EXPECT_EQ(counts[OpParams::AttentionParams], 2);
  EXPECT_EQ(counts[OpParams::SiluMulParams], 2);
  EXPECT_EQ(counts[OpParams::AddParams], 0);
  EXPECT_EQ(counts[OpParams::GatherRowsParams], 1);

  // Fused weights: q, k, v (8 + 2 * 4 heads of 16) and gate, up (2 * 384) rows, in order.
  EXPECT_EQ(shapeOf(findWeight(rank, "layers.0.attn.qkv.weight")),
            (std::vector<uint64_t>{256, 128}));
  EXPECT_EQ(shapeOf(findWeight(rank, "layers.1.mlp.gate_up.weight")),
            (std::vector<uint64_t>{768, 128}));
  EXPECT_EQ(shapeOf(findWeight(rank, "embed.weight")), (std::vector<uint64_t>{2048, 128}));
  EXPECT_EQ(shapeOf(findWeight(rank, "rope.inv_freq")), (std::vector<uint64_t>{8}));
  EXPECT_EQ(findWeight(rank, "lm_head.weight"), nullptr); // tied: one stored tensor
  EXPECT_EQ(findWeight(rank, "layers.0.attn.q.weight"), nullptr);
  EXPECT_EQ(storedF32(*artifact, "layers.0.attn.qkv.weight"),
            checkpointRows(model, {"model.layers.0.self_attn.q_proj.weight",
                                   "model.layers.0.self_attn.k_proj.weight",
                                   "model.layers.0.self_attn.v_proj.weight"}));
  EXPECT_EQ(storedF32(*artifact, "layers.1.mlp.gate_up.weight"),
            checkpointRows(model, {"model.layers.1.mlp.gate_proj.weight",
                                   "model.layers.1.mlp.up_proj.weight"}));

  // The tied lm_head reads the embedding's table buffer.
  const schema::Op *embedding = rank.program()->Get(0);
  const schema::Op *lmHead = rank.program()->Get(rank.program()->size() - 1);
  ASSERT_EQ(embedding->params_type(), OpParams::EmbeddingParams);
  ASSERT_EQ(lmHead->params_type(), OpParams::LinearParams);
  EXPECT_EQ(lmHead->inputs()->Get(1), embedding->inputs()->Get(1));
  EXPECT_EQ(lmHead->outputs()->Get(0), rank.logits());
  EXPECT_NE(log_.str().find("memory plan: activation arena"), std::string::npos) << log_.str();
}

// The op sequence of one layer, as the runtime executes it.
TEST_F(CompileTest, LayerOpOrderFollowsTheSchema) {
  std::string model = fixtureModel("tiny-llama");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  ASSERT_TRUE(compileModel(options(model)).isOk()) << log_.str();
  auto artifact = load();
  ASSERT_TRUE(artifact);
  const schema::Rank &rank = artifact->rank(0);
  std::vector<std::pair<std::string, OpParams>> expected = {
      {"embed", OpParams::EmbeddingParams},
      {"layers.0.attn_norm", OpParams::RmsNormParams},
      {"layers.0.attn.qkv", OpParams::LinearParams},
      {"layers.0.attn.rope_kv_write", OpParams::RopeKvWriteParams},
      {"layers.0.attention", OpParams::AttentionParams},
      {"layers.0.attn.o", OpParams::LinearParams},
      {"layers.0.mlp_norm", OpParams::AddRmsNormParams},
      {"layers.0.mlp.gate_up", OpParams::LinearParams},
      {"layers.0.mlp.silu_mul", OpParams::SiluMulParams},
      {"layers.0.mlp.down", OpParams::LinearParams},
      {"layers.1.attn_norm", OpParams::AddRmsNormParams},
      {"layers.1.attn.qkv", OpParams::LinearParams}};
  ASSERT_GE(rank.program()->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const schema::Op *op = rank.program()->Get(i);
    EXPECT_EQ(op->name()->str(), expected[i].first) << "op " << i;
    EXPECT_EQ(op->params_type(), expected[i].second) << "op " << i;
  }
  const schema::Op *last = rank.program()->Get(rank.program()->size() - 1);
  EXPECT_EQ(last->name()->str(), "lm_head");
  // Untied: lm_head has its own weight; the sharded checkpoint's tensors resolve.
  EXPECT_EQ(shapeOf(findWeight(rank, "lm_head.weight")), (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(storedF32(*artifact, "lm_head.weight"), checkpointRows(model, {"lm_head.weight"}));
}

TEST_F(CompileTest, StoresWeightsInTheRequestedDtype) {
  std::string model = fixtureModel("tiny-llama3");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  CompileOptions o = options(model);
  o.dtype = "bf16";
  o.maxBatch = 4;
  o.maxSeqLen = 64;
  ASSERT_TRUE(compileModel(o).isOk()) << log_.str();
  auto artifact = load();
  ASSERT_TRUE(artifact);
  const schema::Rank &rank = artifact->rank(0);
  EXPECT_EQ(artifact->plan().limits()->max_tokens_per_step(), 256u); // min(2048, 4 * 64)
  // head_dim 32 with 4 / 1 heads: qkv rows (4 + 2) * 32.
  const schema::WeightEntry *qkv = findWeight(rank, "layers.0.attn.qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(shapeOf(qkv), (std::vector<uint64_t>{192, 64}));
  EXPECT_EQ(qkv->dtype(), schema::DType::BF16);
  EXPECT_EQ(findWeight(rank, "final_norm.weight")->dtype(), schema::DType::F32);
  EXPECT_EQ(findWeight(rank, "rope.inv_freq")->dtype(), schema::DType::F32);
  // F16 checkpoint -> bf16: each element is round-to-nearest-even of the exact fp32 value.
  std::vector<float> expected = checkpointRows(model, {"model.layers.0.self_attn.q_proj.weight",
                                                       "model.layers.0.self_attn.k_proj.weight",
                                                       "model.layers.0.self_attn.v_proj.weight"});
  for (uint32_t i = 0; i < rank.weights()->size(); ++i) {
    if (rank.weights()->Get(i) != qkv)
      continue;
    auto bytes = artifact->weightBytes(0, static_cast<int>(i));
    ASSERT_EQ(bytes.size(), expected.size() * 2);
    for (size_t e = 0; e < expected.size(); ++e) {
      uint16_t stored;
      std::memcpy(&stored, bytes.data() + 2 * e, 2);
      ASSERT_EQ(stored, f32ToBf16(expected[e])) << "element " << e;
    }
  }
  EXPECT_EQ(artifact->plan().model()->rope_scaling()->str(), "llama3");
  EXPECT_EQ(artifact->plan().model()->source_dtype(), schema::DType::F16);
}

// The activations' dtypes of `rank`: {non-logits activation dtypes} and the logits-path ones
// (Rank.logits and, at tp > 1, the lm_head shard its AllGather gathers).
struct ActivationDtypes {
  std::set<schema::DType> hidden, logits;
};
ActivationDtypes activationDtypes(const schema::Rank &rank) {
  std::set<uint32_t> logitsPath = {rank.logits()};
  for (const schema::Op *op : *rank.program())
    if (op->params_type() == OpParams::AllGatherParams && op->outputs()->Get(0) == rank.logits())
      logitsPath.insert(op->inputs()->Get(0));
  ActivationDtypes dtypes;
  for (uint32_t i = 0; i < rank.buffers()->size(); ++i) {
    const schema::Buffer *b = rank.buffers()->Get(i);
    if (b->kind() == schema::BufferKind::Activation)
      (logitsPath.count(i) ? dtypes.logits : dtypes.hidden).insert(b->dtype());
  }
  return dtypes;
}

// --dtype bf16|fp16 (plan.fbs "Dtypes") on the tiny-llama fixture at 256 tokens per step: the
// plan's activation and KV dtypes, every activation but the fp32 logits in the dtype, and at
// --tp 2 the lm_head shard that the AllGather gathers is fp32 too. Each artifact passes the
// loader's plan checks. The logits values have max_logits_per_step rows (64 here: max(4,
// min(64, 256))), so at --tp 1 the arena's peak is in the MLP: gate_up's output (256 x 256),
// silu_mul's (256 x 128) and the residual (256 x 64), 4 bytes each in fp32, 2 in bf16/fp16. At
// --tp 2 (MLP halved) it is at the lm_head: the gathered fp32 logits (64 x 512 x 4), the fp32
// shard (64 x 256 x 4) and the bf16 input rows (64 x 64 x 2).
TEST_F(CompileTest, HalfDtypesStoreActivationsAndKvCacheInTheDtype) {
  std::string model = fixtureModel("tiny-llama");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  struct Case {
    std::string dtype;
    int64_t tp;
    schema::DType expected;
    uint64_t arenaBytes;
  };
  constexpr uint64_t kMlpElements = 256 * 256 + 256 * 128 + 256 * 64;
  for (const Case &c : {Case{"fp32", 1, schema::DType::F32, kMlpElements * 4},
                        Case{"bf16", 1, schema::DType::BF16, kMlpElements * 2},
                        Case{"fp16", 1, schema::DType::F16, kMlpElements * 2},
                        Case{"bf16", 2, schema::DType::BF16, 64 * 512 * 4 + 64 * 256 * 4 + 64 * 64 * 2}}) {
    SCOPED_TRACE(c.dtype + " tp " + std::to_string(c.tp));
    fs::remove_all(outDir_);
    CompileOptions o = options(model);
    o.dtype = c.dtype;
    o.tp = c.tp;
    o.maxBatch = 4;
    o.maxSeqLen = 64;
    ASSERT_TRUE(compileModel(o).isOk()) << log_.str();
    auto artifact = load();
    ASSERT_TRUE(artifact);
    const schema::Plan &plan = artifact->plan();
    EXPECT_EQ(plan.activation_dtype(), c.expected);
    EXPECT_EQ(plan.kv_cache()->dtype(), c.expected);
    for (int r = 0; r < c.tp; ++r) {
      const schema::Rank &rank = artifact->rank(r);
      ActivationDtypes dtypes = activationDtypes(rank);
      EXPECT_EQ(dtypes.hidden, std::set<schema::DType>{c.expected});
      EXPECT_EQ(dtypes.logits, std::set<schema::DType>{schema::DType::F32});
      EXPECT_EQ(rank.arena_bytes(), c.arenaBytes);
    }
  }
}

TEST_F(CompileTest, TiedBf16FixtureCompilesWithOneTable) {
  std::string model = fixtureModel("tiny-llama-tied");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  ASSERT_TRUE(compileModel(options(model)).isOk()) << log_.str();
  auto artifact = load();
  ASSERT_TRUE(artifact);
  const schema::Rank &rank = artifact->rank(0);
  EXPECT_EQ(findWeight(rank, "lm_head.weight"), nullptr);
  EXPECT_EQ(findWeight(rank, "embed.weight")->dtype(), schema::DType::F32); // --dtype fp32
  EXPECT_EQ(opCounts(rank)[OpParams::AttentionParams], 3);
  ASSERT_EQ(artifact->plan().model()->eos_token_ids()->size(), 2u); // config 2 + generation [2, 7]
  EXPECT_EQ(artifact->plan().model()->eos_token_ids()->Get(1), 7);
}

TEST_F(CompileTest, DumpIrPrintsTheModuleAfterEachPass) {
  std::string model = fixtureModel("tiny-llama");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  CompileOptions o = options(model);
  o.dumpIr = true;
  ASSERT_TRUE(compileModel(o).isOk()) << log_.str();
  std::string text = log_.str();
  EXPECT_NE(text.find("// ----- built module -----"), std::string::npos) << text;
  EXPECT_NE(text.find("IR Dump After FuseQkvPass (kiln-fuse-qkv)"), std::string::npos) << text;
  EXPECT_NE(text.find("IR Dump After PlanMemoryPass (kiln-plan-memory)"), std::string::npos);
  EXPECT_NE(text.find("kiln.add_rms_norm"), std::string::npos);
}

// Bad flags fail before anything is read, naming the flag and the limit; no artifact appears.
TEST_F(CompileTest, BadOptionsGiveTheDocumentedErrors) {
  std::string model = fixtureModel("tiny-llama");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  struct Case {
    std::function<void(CompileOptions &)> change;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](CompileOptions &o) { o.tp = 3; },
       "--tp 3 does not divide config.json num_attention_heads (4)"},
#ifdef KILN_HAVE_CODEGEN
      {[](CompileOptions &o) {
         o.targets = {"cpu", "sm_12"};
       },
       "--target 'sm_12'"},
#else
      {[](CompileOptions &o) {
         o.targets = {"cpu", "sm_90a"};
       },
       "target sm_90a: the CUDA code generator is not built into this kiln yet"},
#endif
      {[](CompileOptions &o) { o.maxSeqLen = 512; },
       "--max-seq-len 512 exceeds the model's positions: max_position_embeddings (256)"},
      {[](CompileOptions &o) { o.kvBlockSize = 24; },
       "--kv-block-size must be a power of two in [1, 256], got 24"},
      {[](CompileOptions &o) { o.kvBlockSize = 512; },
       "--kv-block-size must be a power of two in [1, 256], got 512"},
      {[](CompileOptions &o) { o.dtype = "fp8"; }, "--dtype 'fp8' is not supported"},
      {[](CompileOptions &o) { o.maxBatch = 0; }, "--max-batch must be positive, got 0"},
      {[](CompileOptions &o) { o.maxSeqLen = -5; }, "--max-seq-len must be positive"},
      {[](CompileOptions &o) { o.maxTokensPerStep = 4; },
       "--max-tokens-per-step (4) must be at least --max-batch (8)"},
      {[](CompileOptions &o) { o.targets = {"tpu"}; }, "--target 'tpu' is not a known target"},
      {[](CompileOptions &o) { o.modelDir += "-missing"; }, "config.json"},
  };
  for (const Case &c : cases) {
    CompileOptions o = options(model);
    c.change(o);
    Status status = compileModel(o);
    EXPECT_FALSE(status.isOk()) << c.message;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << "got: " << status.toString() << "\nwant: " << c.message;
    EXPECT_FALSE(fs::exists(outDir_)) << c.message;
  }
}

// A model directory whose config or checkpoint is wrong fails with the field or tensor named.
TEST_F(CompileTest, BadConfigsAndCheckpointsAreReported) {
  std::string model = fixtureModel("tiny-llama-tied");
  if (!fs::exists(model))
    GTEST_SKIP() << "fixture absent: " << model;
  fs::path dir = fs::path(::testing::TempDir()) / "kiln_compile_bad_model";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(model) / "model.safetensors", dir / "model.safetensors");
  auto config = readFile(model + "/config.json");
  ASSERT_TRUE(config.isOk());
  auto writeConfig = [&](const std::string &from, const std::string &to) {
    std::string text = *config;
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    ASSERT_TRUE(writeFileAtomic((dir / "config.json").string(), text).isOk());
  };

  writeConfig("\"model_type\": \"llama\"", "\"model_type\": \"gpt_neox\"");
  Status status = compileModel(options(dir.string()));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("gpt_neox"), std::string::npos) << status.toString();

  // More layers than the checkpoint holds: the missing tensor is named.
  writeConfig("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 4");
  status = compileModel(options(dir.string()));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("model.layers.3."), std::string::npos) << status.toString();

  // An intermediate size the tensors do not have: the weight and both row counts are named.
  writeConfig("\"intermediate_size\": 128", "\"intermediate_size\": 96");
  status = compileModel(options(dir.string()));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("weight 'layers.0.mlp.gate.weight': its checkpoint tensors "
                                  "have 128 rows in total, expected 96"),
            std::string::npos)
      << status.toString();
  EXPECT_FALSE(fs::exists(outDir_));
  fs::remove_all(dir);
}

} // namespace
} // namespace kiln::compiler
