// Plan emission on a small Llama with a synthetic checkpoint: buffer roles and op input/output
// order exactly as schema/plan.fbs documents, step input shapes at the maxima, arena offsets from
// plan-memory, and weight bytes produced by concatenation and dtype conversion.
#include "compiler/emit/plan_emitter.h"
#include "compiler/emit/weight_sources.h"
#include "compiler/import/safetensors.h"
#include "tests/compiler/transforms/small_llama.h"
#include "runtime/base/file.h"
#include "runtime/base/half.h"

#include <cmath>
#include <cstring>
#include <filesystem>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using namespace kiln::compiler::testing;
using schema::BufferKind;
using schema::OpParams;
using schema::RowScale;
using schema::StepInputKind;

// Writes MODEL_DIR/model.safetensors holding every tensor the small Llama reads, F32, element i
// of tensor t equal to t + i / 1024 so concatenation order is visible in the bytes.
void writeCheckpoint(const fs::path &dir, const HfModelConfig &c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {c.vocabSize, c.hiddenSize}},
      {"model.norm.weight", {c.hiddenSize}}};
  for (int64_t l = 0; l < c.numLayers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.push_back({p + "input_layernorm.weight", {c.hiddenSize}});
    tensors.push_back({p + "post_attention_layernorm.weight", {c.hiddenSize}});
    tensors.push_back({p + "self_attn.q_proj.weight", {c.numHeads * c.headDim, c.hiddenSize}});
    tensors.push_back({p + "self_attn.k_proj.weight", {c.numKvHeads * c.headDim, c.hiddenSize}});
    tensors.push_back({p + "self_attn.v_proj.weight", {c.numKvHeads * c.headDim, c.hiddenSize}});
    tensors.push_back({p + "self_attn.o_proj.weight", {c.hiddenSize, c.numHeads * c.headDim}});
    tensors.push_back({p + "mlp.gate_proj.weight", {c.intermediateSize, c.hiddenSize}});
    tensors.push_back({p + "mlp.up_proj.weight", {c.intermediateSize, c.hiddenSize}});
    tensors.push_back({p + "mlp.down_proj.weight", {c.hiddenSize, c.intermediateSize}});
  }
  std::string header = "{", data;
  for (size_t t = 0; t < tensors.size(); ++t) {
    int64_t count = 1;
    std::string shape;
    for (int64_t d : tensors[t].second) {
      count *= d;
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    }
    size_t begin = data.size();
    for (int64_t i = 0; i < count; ++i) {
      float value = static_cast<float>(t) + static_cast<float>(i % 1024) / 1024.0f;
      data.append(reinterpret_cast<const char *>(&value), 4);
    }
    header += (t ? "," : "") + std::string("\"") + tensors[t].first +
              "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0)
    header += ' ';
  uint64_t length = header.size();
  std::string file(reinterpret_cast<const char *>(&length), 8);
  ASSERT_TRUE(writeFileAtomic((dir / "model.safetensors").string(), file + header + data).isOk());
}

class PlanEmitterTest : public ::testing::Test {
protected:
  void SetUp() override {
    // One directory per test: ctest -j runs this binary's tests in parallel processes.
    dir_ = fs::path(::testing::TempDir()) /
           ("kiln_plan_emitter_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    writeCheckpoint(dir_, config_);
    auto checkpoint = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    checkpoint_ = std::make_shared<const SafetensorsCheckpoint>(std::move(checkpoint).value());
    options_.modelDir = dir_.string();
    options_.maxBatch = 4;
    options_.maxSeqLen = 100;
    options_.maxTokensPerStep = 32;
    options_.kvBlockSize = 16;
    options_.targets = {"cpu"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Builds, binds, fuses and plans; then emits.
  mlir::FailureOr<rt::ArtifactContents> emit(mlir::Type weightType = {}, bool fuse = true) {
    module_ = buildSmallLlama(context_, config_, weightType);
    EXPECT_TRUE(succeeded(bindWeightSources(*module_, *checkpoint_)));
    std::string errors = fuse ? runPasses(*module_, createFuseQkvPass(), createFuseGateUpPass(),
                                          createFuseAddRmsNormPass(),
                                          createPlanMemoryPass(options_.maxTokensPerStep))
                              : runPasses(*module_, createPlanMemoryPass(32));
    EXPECT_EQ(errors, "");
    mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diag) {
      errors_ += diag.str() + "\n";
      return mlir::success();
    });
    return emitArtifactContents(*module_, config_, checkpoint_, options_);
  }

  HfModelConfig config_ = smallLlamaConfig();
  fs::path dir_;
  std::shared_ptr<const SafetensorsCheckpoint> checkpoint_;
  EmitOptions options_;
  mlir::MLIRContext context_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  std::string errors_;
};

const schema::OpT *findOp(const schema::RankT &rank, const std::string &name) {
  for (const auto &op : rank.program)
    if (op->name == name)
      return op.get();
  return nullptr;
}

TEST_F(PlanEmitterTest, OpsReadAndWriteBuffersInSchemaOrder) {
  auto contents = emit();
  ASSERT_TRUE(succeeded(contents)) << errors_;
  const schema::RankT &rank = *contents->plan.ranks.at(0);
  auto buffer = [&](uint32_t index) { return rank.buffers.at(index).get(); };
  auto isInput = [&](uint32_t index, StepInputKind kind) {
    return buffer(index)->kind == BufferKind::StepInput && buffer(index)->step_input == kind;
  };
  // embed; 9 per layer (norm, qkv, rope, attention, o, add_rms_norm, gate_up, silu_mul, down);
  // final add_rms_norm, gather_rows, lm_head.
  ASSERT_EQ(rank.program.size(), 1u + 2u * 9u + 3u);

  const schema::OpT *embed = findOp(rank, "embed");
  ASSERT_TRUE(embed);
  EXPECT_TRUE(isInput(embed->inputs[0], StepInputKind::TokenIds));
  EXPECT_EQ(buffer(embed->inputs[1])->name, "embed.weight");

  const schema::OpT *rope = findOp(rank, "layers.1.attn.rope_kv_write");
  ASSERT_TRUE(rope);
  ASSERT_EQ(rope->inputs.size(), 4u);
  EXPECT_EQ(buffer(rope->inputs[0])->name, "layers.1.attn.qkv");
  EXPECT_EQ(buffer(rope->inputs[0])->shape, (std::vector<uint64_t>{32, 128}));
  EXPECT_TRUE(isInput(rope->inputs[1], StepInputKind::Positions));
  EXPECT_TRUE(isInput(rope->inputs[2], StepInputKind::SlotMapping));
  EXPECT_EQ(buffer(rope->inputs[3])->name, "rope.inv_freq");
  const auto *ropeParams = rope->params.AsRopeKvWriteParams();
  ASSERT_TRUE(ropeParams);
  EXPECT_EQ(ropeParams->layer, 1u);
  EXPECT_EQ(ropeParams->num_kv_heads, 2u);
  EXPECT_EQ(ropeParams->rotary_dim, 16u);

  const schema::OpT *attention = findOp(rank, "layers.1.attention");
  ASSERT_TRUE(attention);
  ASSERT_EQ(attention->inputs.size(), 5u);
  EXPECT_EQ(attention->inputs[0], rope->outputs[0]);
  EXPECT_TRUE(isInput(attention->inputs[1], StepInputKind::Positions));
  EXPECT_TRUE(isInput(attention->inputs[2], StepInputKind::QueryStartLoc));
  EXPECT_TRUE(isInput(attention->inputs[3], StepInputKind::ContextLens));
  EXPECT_TRUE(isInput(attention->inputs[4], StepInputKind::BlockTables));
  EXPECT_FLOAT_EQ(attention->params.AsAttentionParams()->scale, 0.25f);  // 1 / sqrt(16)

  const schema::OpT *norm = findOp(rank, "layers.1.mlp_norm");
  ASSERT_TRUE(norm && norm->params.AsAddRmsNormParams());
  ASSERT_EQ(norm->inputs.size(), 3u);
  EXPECT_EQ(norm->outputs[0], norm->inputs[1]);  // residual updated in place
  EXPECT_EQ(buffer(norm->inputs[0])->name, "layers.1.attn.o");
  EXPECT_EQ(buffer(norm->inputs[2])->name, "layers.1.mlp_norm.weight");

  const schema::OpT *gather = findOp(rank, "logits_rows");
  ASSERT_TRUE(gather);
  EXPECT_TRUE(isInput(gather->inputs[1], StepInputKind::LogitsIndices));
  EXPECT_EQ(buffer(gather->outputs[0])->rows, RowScale::Logits);
  const schema::OpT *head = findOp(rank, "lm_head");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->inputs, (std::vector<uint32_t>{gather->outputs[0], embed->inputs[1]}));
  EXPECT_FALSE(head->params.AsLinearParams()->has_bias);
  EXPECT_EQ(rank.logits, head->outputs[0]);
  EXPECT_EQ(buffer(rank.logits)->rows, RowScale::Logits);
  EXPECT_EQ(buffer(rank.logits)->shape, (std::vector<uint64_t>{32, 100}));
}

TEST_F(PlanEmitterTest, BuffersCarryTheMaximaAndThePlannedOffsets) {
  auto contents = emit();
  ASSERT_TRUE(succeeded(contents)) << errors_;
  const schema::PlanT &plan = contents->plan;
  const schema::RankT &rank = *plan.ranks.at(0);
  EXPECT_EQ(plan.limits->max_blocks_per_seq, 7u);  // ceil(100 / 16)
  EXPECT_EQ(plan.kv_cache->num_kv_heads, 2u);
  EXPECT_EQ(plan.kv_cache->block_size, 16u);
  auto step = module_->lookupSymbol<mlir::func::FuncOp>("step");
  EXPECT_EQ(rank.arena_bytes,
            static_cast<uint64_t>(step->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr).getInt()));
  int stepInputs = 0;
  for (const auto &buffer : rank.buffers) {
    if (buffer->kind == BufferKind::StepInput) {
      ++stepInputs;
      std::vector<uint64_t> expected = {32};
      if (buffer->step_input == StepInputKind::QueryStartLoc)
        expected = {5};
      else if (buffer->step_input == StepInputKind::ContextLens)
        expected = {4};
      else if (buffer->step_input == StepInputKind::BlockTables)
        expected = {4, 7};
      EXPECT_EQ(buffer->shape, expected) << buffer->name;
      EXPECT_EQ(buffer->dtype, schema::DType::I32);
    }
    if (buffer->kind == BufferKind::Activation) {
      EXPECT_EQ(buffer->arena_offset % 256, 0u) << buffer->name;
      EXPECT_LE(buffer->arena_offset + buffer->size_bytes, rank.arena_bytes) << buffer->name;
      EXPECT_EQ(buffer->size_bytes, buffer->shape[0] * buffer->shape[1] * 4) << buffer->name;
    }
  }
  EXPECT_EQ(stepInputs, 7);
  // Every weight buffer indexes rankWeights[0], which the writer turns into Rank.weights.
  for (const auto &buffer : rank.buffers)
    if (buffer->kind == BufferKind::Weight)
      EXPECT_EQ(contents->rankWeights[0].at(buffer->weight).name, buffer->name);
}

TEST_F(PlanEmitterTest, WeightSourcesConcatenateAndConvert) {
  auto contents = emit(mlir::Float16Type::get(&context_));
  ASSERT_TRUE(succeeded(contents)) << errors_;
  std::vector<float> q, k, v;
  for (auto [name, out] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) {
    auto values = checkpoint_->readF32(std::string("model.layers.0.self_attn.") + name +
                                       "_proj.weight");
    ASSERT_TRUE(values.isOk());
    *out = *values;
  }
  for (const rt::WeightSource &source : contents->rankWeights[0]) {
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(source.produce(bytes).isOk()) << source.name;
    if (source.name == "layers.0.attn.qkv.weight") {
      EXPECT_EQ(source.dtype, schema::DType::F16);
      EXPECT_EQ(source.shape, (std::vector<uint64_t>{128, 64}));
      std::vector<float> expected = q;
      expected.insert(expected.end(), k.begin(), k.end());
      expected.insert(expected.end(), v.begin(), v.end());
      ASSERT_EQ(bytes.size(), expected.size() * 2);
      for (size_t i = 0; i < expected.size(); ++i) {
        uint16_t half;
        std::memcpy(&half, bytes.data() + 2 * i, 2);
        ASSERT_EQ(half, f32ToF16(expected[i])) << i;
      }
    } else if (source.name == "layers.0.attn_norm.weight") {
      EXPECT_EQ(source.dtype, schema::DType::F32);  // norms stay fp32 whatever --dtype says
      EXPECT_EQ(bytes.size(), 64u * 4);
    } else if (source.name == "rope.inv_freq") {
      ASSERT_EQ(bytes.size(), 8u * 4);
      float first, second;
      std::memcpy(&first, bytes.data(), 4);
      std::memcpy(&second, bytes.data() + 4, 4);
      EXPECT_FLOAT_EQ(first, 1.0f);
      EXPECT_NEAR(second, std::pow(10000.0, -2.0 / 16.0), 1e-7);
    }
  }
}

// --dtype bf16/fp16 (plan.fbs "Dtypes"): activation_dtype, the KV cache and every activation but
// the logits in that dtype, sized at 2 bytes an element; the logits stay F32 at 4. Weights follow
// --dtype for the matrices only.
TEST_F(PlanEmitterTest, HalfDtypeStoresActivationsAndKvInItWithFp32Logits) {
  auto f32 = emit();
  ASSERT_TRUE(succeeded(f32)) << errors_;
  EXPECT_EQ(f32->plan.activation_dtype, schema::DType::F32);
  EXPECT_EQ(f32->plan.kv_cache->dtype, schema::DType::F32);
  const uint64_t f32Arena = f32->plan.ranks[0]->arena_bytes;
  const std::pair<mlir::Type, schema::DType> halves[] = {
      {mlir::BFloat16Type::get(&context_), schema::DType::BF16},
      {mlir::Float16Type::get(&context_), schema::DType::F16}};
  for (auto [type, dtype] : halves) {
    SCOPED_TRACE(schema::EnumNameDType(dtype));
    auto contents = emit(type);
    ASSERT_TRUE(succeeded(contents)) << errors_;
    const schema::PlanT &plan = contents->plan;
    const schema::RankT &rank = *plan.ranks.at(0);
    EXPECT_EQ(plan.activation_dtype, dtype);
    EXPECT_EQ(plan.kv_cache->dtype, dtype);
    int halfActivations = 0;
    for (size_t i = 0; i < rank.buffers.size(); ++i) {
      const schema::BufferT &b = *rank.buffers[i];
      if (b.kind != BufferKind::Activation)
        continue;
      const bool logits = i == rank.logits;
      EXPECT_EQ(b.dtype, logits ? schema::DType::F32 : dtype) << b.name;
      EXPECT_EQ(b.size_bytes, b.shape[0] * b.shape[1] * (logits ? 4 : 2)) << b.name;
      EXPECT_EQ(b.arena_offset % 256, 0u) << b.name;
      EXPECT_LE(b.arena_offset + b.size_bytes, rank.arena_bytes) << b.name;
      halfActivations += !logits;
    }
    // embed; per layer norm, qkv, q, attention, o, mlp_norm y, gate_up, silu_mul, down; the
    // final norm's y and the gathered rows (the residual is updated in place: no buffer).
    EXPECT_EQ(halfActivations, 1 + 2 * 9 + 2);
    const schema::OpT *head = findOp(rank, "lm_head");
    ASSERT_TRUE(head);
    EXPECT_EQ(rank.buffers[head->inputs[0]]->dtype, dtype);          // reads half rows
    EXPECT_EQ(rank.buffers[head->inputs[1]]->dtype, dtype);          // the tied table
    EXPECT_EQ(rank.buffers[head->outputs[0]]->dtype, schema::DType::F32);  // writes fp32 logits
    for (const auto &b : rank.buffers)
      if (b->name == "final_norm.weight" || b->name == "rope.inv_freq")
        EXPECT_EQ(b->dtype, schema::DType::F32) << b->name;
    // The peak is in the MLP (residual, normed rows, gate_up and silu_mul outputs at 32 rows),
    // all of it halved; the fp32 logits (32 x 100 x 4 = 12800 bytes) fit into ranges freed by
    // then in both layouts, so the arena is exactly half.
    EXPECT_EQ(f32Arena, 49152u);
    EXPECT_EQ(rank.arena_bytes, 24576u);
  }
}

TEST_F(PlanEmitterTest, RefusesUnfusedOrUnplannedModules) {
  auto unfused = emit(/*weightType=*/{}, /*fuse=*/false);
  EXPECT_TRUE(failed(unfused));
  EXPECT_NE(errors_.find("has no plan op: the fusion passes"), std::string::npos) << errors_;

  errors_.clear();
  module_ = buildSmallLlama(context_, config_);
  mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diag) {
    errors_ += diag.str() + "\n";
    return mlir::success();
  });
  EXPECT_TRUE(failed(emitArtifactContents(*module_, config_, checkpoint_, options_)));
  EXPECT_NE(errors_.find("run plan-memory before emission"), std::string::npos) << errors_;
}

TEST_F(PlanEmitterTest, ChatTemplateFromTokenizerConfigOrChatTemplateJinja) {
  auto write = [&](const std::string &json) {
    ASSERT_TRUE(writeFileAtomic((dir_ / "tokenizer_config.json").string(), json).isOk());
  };
  auto absent = readChatTemplate(dir_.string());
  ASSERT_TRUE(absent.isOk());
  EXPECT_EQ(*absent, "");
  write(R"({"chat_template": "{{ messages[0]['content'] }}"})");
  EXPECT_EQ(*readChatTemplate(dir_.string()), "{{ messages[0]['content'] }}");
  write(R"({"chat_template": [{"name": "tool_use", "template": "t"},
                               {"name": "default", "template": "x"}]})");
  EXPECT_EQ(*readChatTemplate(dir_.string()), "x");
  write(R"({"chat_template": [{"name": "tool_use", "template": "t"}]})");
  EXPECT_EQ(*readChatTemplate(dir_.string()), "");
  write("{not json");
  auto bad = readChatTemplate(dir_.string());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("tokenizer_config.json: not valid JSON"),
            std::string::npos);
  EXPECT_EQ(extraModelFiles(dir_.string()),
            (std::vector<std::string>{(dir_ / "tokenizer_config.json").string()}));
  // transformers 4.47+ writes the template to chat_template.jinja; it wins and is copied along.
  write(R"({"chat_template": "old"})");
  ASSERT_TRUE(writeFileAtomic((dir_ / "chat_template.jinja").string(), "{{ 'jinja' }}").isOk());
  EXPECT_EQ(*readChatTemplate(dir_.string()), "{{ 'jinja' }}");
  EXPECT_EQ(extraModelFiles(dir_.string()),
            (std::vector<std::string>{(dir_ / "tokenizer_config.json").string(),
                                      (dir_ / "chat_template.jinja").string()}));
}

} // namespace
} // namespace kiln::compiler
