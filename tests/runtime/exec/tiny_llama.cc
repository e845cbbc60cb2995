#include "tests/runtime/exec/tiny_llama.h"

#include "runtime/artifact/artifact_writer.h"
#include "schema/version.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <unistd.h>

namespace kiln::rt::testing {
namespace {

using schema::RowScale;
using schema::StepInputKind;

constexpr uint64_t kArenaAlignment = 256;

std::vector<float> invFreq(const TinyLlamaConfig &c) {
  std::vector<float> values(c.headDim / 2);
  for (int32_t i = 0; i < c.headDim / 2; ++i)
    values[i] = 1.0f / std::pow(c.ropeTheta, static_cast<float>(2 * i) / c.headDim);
  return values;
}

// Builds one rank's buffers and program; buffers are appended in creation order.
class RankBuilder {
public:
  RankBuilder(const TinyLlama &model, schema::RankT &rank) : model_(model), rank_(rank) {}

  uint32_t stepInput(const std::string &name, StepInputKind kind, std::vector<uint64_t> shape,
                     RowScale rows) {
    auto b = buffer(name, schema::BufferKind::StepInput, schema::DType::I32, shape, rows);
    b->step_input = kind;
    b->size_bytes = 4 * product(shape);
    return add(std::move(b));
  }

  uint32_t weight(const std::string &name) {
    for (size_t i = 0; i < model_.weights.size(); ++i) {
      if (model_.weights[i].name != name)
        continue;
      auto b = buffer(name, schema::BufferKind::Weight, schema::DType::F32, model_.weights[i].shape,
                      RowScale::Fixed);
      b->weight = static_cast<int32_t>(i);
      return add(std::move(b));
    }
    throw std::runtime_error("no weight " + name);
  }

  uint32_t activation(const std::string &name, uint64_t width, RowScale rows) {
    const TinyLlamaConfig &c = model_.config;
    uint64_t maxRows = c.maxTokensPerStep;
    auto b =
        buffer(name, schema::BufferKind::Activation, schema::DType::F32, {maxRows, width}, rows);
    b->size_bytes = 4 * maxRows * width;
    b->arena_offset = rank_.arena_bytes;
    rank_.arena_bytes += (b->size_bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    return add(std::move(b));
  }

  template <typename Params>
  void op(const std::string &name, Params params, std::vector<uint32_t> inputs,
          std::vector<uint32_t> outputs) {
    auto o = std::make_unique<schema::OpT>();
    o->name = name;
    o->params.Set(std::move(params));
    o->inputs = std::move(inputs);
    o->outputs = std::move(outputs);
    rank_.program.push_back(std::move(o));
  }

private:
  static uint64_t product(const std::vector<uint64_t> &shape) {
    uint64_t p = 1;
    for (uint64_t d : shape)
      p *= d;
    return p;
  }
  std::unique_ptr<schema::BufferT> buffer(const std::string &name, schema::BufferKind kind,
                                          schema::DType dtype, std::vector<uint64_t> shape,
                                          RowScale rows) {
    auto b = std::make_unique<schema::BufferT>();
    b->name = name;
    b->kind = kind;
    b->dtype = dtype;
    b->shape = std::move(shape);
    b->rows = rows;
    return b;
  }
  uint32_t add(std::unique_ptr<schema::BufferT> b) {
    rank_.buffers.push_back(std::move(b));
    return static_cast<uint32_t>(rank_.buffers.size() - 1);
  }

  const TinyLlama &model_;
  schema::RankT &rank_;
};

schema::RmsNormParamsT rmsNormParams(float eps) {
  schema::RmsNormParamsT p;
  p.eps = eps;
  return p;
}
schema::AddRmsNormParamsT addRmsNormParams(float eps) {
  schema::AddRmsNormParamsT p;
  p.eps = eps;
  return p;
}
schema::LinearParamsT linearParams() {
  return schema::LinearParamsT();
}
schema::RopeKvWriteParamsT ropeParams(const TinyLlamaConfig &c, uint32_t layer) {
  schema::RopeKvWriteParamsT p;
  p.layer = layer;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kvHeads;
  p.head_dim = c.headDim;
  p.rotary_dim = c.headDim;
  return p;
}
schema::AttentionParamsT attentionParams(const TinyLlamaConfig &c, uint32_t layer) {
  schema::AttentionParamsT p;
  p.layer = layer;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kvHeads;
  p.head_dim = c.headDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));
  return p;
}

void buildProgram(const TinyLlama &model, schema::RankT &rank) {
  const TinyLlamaConfig &c = model.config;
  RankBuilder b(model, rank);
  uint64_t maxTokens = c.maxTokensPerStep, maxBatch = c.maxBatch;
  uint64_t maxBlocks = (c.maxSeqLen + c.blockSize - 1) / c.blockSize;
  uint32_t tokenIds =
      b.stepInput("token_ids", StepInputKind::TokenIds, {maxTokens}, RowScale::Tokens);
  uint32_t positions =
      b.stepInput("positions", StepInputKind::Positions, {maxTokens}, RowScale::Tokens);
  uint32_t slots =
      b.stepInput("slot_mapping", StepInputKind::SlotMapping, {maxTokens}, RowScale::Tokens);
  uint32_t qsl = b.stepInput("query_start_loc", StepInputKind::QueryStartLoc, {maxBatch + 1},
                             RowScale::Sequences);
  uint32_t ctx =
      b.stepInput("context_lens", StepInputKind::ContextLens, {maxBatch}, RowScale::Sequences);
  uint32_t tables = b.stepInput("block_tables", StepInputKind::BlockTables, {maxBatch, maxBlocks},
                                RowScale::Sequences);
  uint32_t logitsIdx =
      b.stepInput("logits_indices", StepInputKind::LogitsIndices, {maxTokens}, RowScale::Logits);
  uint64_t qWidth = uint64_t(c.heads) * c.headDim;
  uint64_t qkvWidth = uint64_t(c.heads + 2 * c.kvHeads) * c.headDim;
  uint32_t hidden = b.activation("hidden", c.hidden, RowScale::Tokens);
  uint32_t normed = b.activation("normed", c.hidden, RowScale::Tokens);
  uint32_t qkv = b.activation("qkv", qkvWidth, RowScale::Tokens);
  uint32_t q = b.activation("q", qWidth, RowScale::Tokens);
  uint32_t attn = b.activation("attn", qWidth, RowScale::Tokens);
  uint32_t proj = b.activation("proj", c.hidden, RowScale::Tokens);
  uint32_t gateUp = b.activation("gate_up", 2 * uint64_t(c.intermediate), RowScale::Tokens);
  uint32_t act = b.activation("act", c.intermediate, RowScale::Tokens);
  uint32_t gathered = b.activation("gathered", c.hidden, RowScale::Logits);
  uint32_t logits = b.activation("logits", c.vocab, RowScale::Logits);
  uint32_t invFreqBuf = b.weight("rope.inv_freq");
  b.op("embed", schema::EmbeddingParamsT(), {tokenIds, b.weight("embed.weight")}, {hidden});
  b.op("layers.0.input_norm", rmsNormParams(c.eps), {hidden, b.weight("layers.0.input_norm")},
       {normed});
  for (int32_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    uint32_t L = static_cast<uint32_t>(l);
    b.op(p + "qkv", linearParams(), {normed, b.weight(p + "qkv")}, {qkv});
    b.op(p + "rope", ropeParams(c, L), {qkv, positions, slots, invFreqBuf}, {q});
    b.op(p + "attention", attentionParams(c, L), {q, positions, qsl, ctx, tables}, {attn});
    b.op(p + "o", linearParams(), {attn, b.weight(p + "o")}, {proj});
    b.op(p + "post_norm", addRmsNormParams(c.eps), {proj, hidden, b.weight(p + "post_norm")},
         {hidden, normed});
    b.op(p + "gate_up", linearParams(), {normed, b.weight(p + "gate_up")}, {gateUp});
    b.op(p + "silu_mul", schema::SiluMulParamsT(), {gateUp}, {act});
    b.op(p + "down", linearParams(), {act, b.weight(p + "down")}, {proj});
    std::string next =
        l + 1 < c.layers ? "layers." + std::to_string(l + 1) + ".input_norm" : "final_norm";
    b.op(p + "residual_norm", addRmsNormParams(c.eps), {proj, hidden, b.weight(next)},
         {hidden, normed});
  }
  b.op("gather_logits_rows", schema::GatherRowsParamsT(), {normed, logitsIdx}, {gathered});
  b.op("lm_head", linearParams(), {gathered, b.weight("lm_head")}, {logits});
  rank.logits = logits;
}

} // namespace

const NamedTensor &TinyLlama::weight(const std::string &name) const {
  for (const NamedTensor &t : weights)
    if (t.name == name)
      return t;
  throw std::runtime_error("no weight " + name);
}

TinyLlama makeTinyLlama(const TinyLlamaConfig &config) {
  TinyLlama model;
  model.config = config;
  const TinyLlamaConfig &c = config;
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto add = [&](const std::string &name, std::vector<uint64_t> shape, float scale, float offset) {
    NamedTensor t{name, shape, {}};
    uint64_t n = 1;
    for (uint64_t d : shape)
      n *= d;
    t.values.resize(n);
    for (float &v : t.values)
      v = offset + scale * uniform(rng);
    model.weights.push_back(std::move(t));
  };
  uint64_t h = c.hidden, qkv = uint64_t(c.heads + 2 * c.kvHeads) * c.headDim;
  add("embed.weight", {uint64_t(c.vocab), h}, 1.0f, 0.0f);
  for (int32_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_norm", {h}, 0.2f, 1.0f);
    add(p + "qkv", {qkv, h}, 1.0f / std::sqrt(float(h)), 0.0f);
    add(p + "o", {h, uint64_t(c.heads) * c.headDim}, 1.0f / std::sqrt(float(c.heads * c.headDim)),
        0.0f);
    add(p + "post_norm", {h}, 0.2f, 1.0f);
    add(p + "gate_up", {2 * uint64_t(c.intermediate), h}, 1.0f / std::sqrt(float(h)), 0.0f);
    add(p + "down", {h, uint64_t(c.intermediate)}, 1.0f / std::sqrt(float(c.intermediate)), 0.0f);
  }
  add("final_norm", {h}, 0.2f, 1.0f);
  add("lm_head", {uint64_t(c.vocab), h}, 1.0f / std::sqrt(float(h)), 0.0f);
  model.weights.push_back({"rope.inv_freq", {uint64_t(c.headDim / 2)}, invFreq(c)});
  return model;
}

schema::PlanT buildTinyLlamaPlan(const TinyLlama &model) {
  const TinyLlamaConfig &c = model.config;
  schema::PlanT plan;
  plan.schema_version = kSchemaVersion;
  plan.compiler_version = kKilnVersion;
  plan.model = std::make_unique<schema::ModelInfoT>();
  plan.model->family = "llama";
  plan.model->architecture = "LlamaForCausalLM";
  plan.model->vocab_size = c.vocab;
  plan.model->hidden_size = c.hidden;
  plan.model->intermediate_size = c.intermediate;
  plan.model->num_layers = c.layers;
  plan.model->num_heads = c.heads;
  plan.model->num_kv_heads = c.kvHeads;
  plan.model->head_dim = c.headDim;
  plan.model->rms_norm_eps = c.eps;
  plan.model->rope_theta = c.ropeTheta;
  plan.model->max_position_embeddings = c.maxSeqLen;
  plan.limits = std::make_unique<schema::CompiledLimitsT>();
  plan.limits->max_batch = c.maxBatch;
  plan.limits->max_seq_len = c.maxSeqLen;
  plan.limits->max_tokens_per_step = c.maxTokensPerStep;
  plan.limits->max_blocks_per_seq = (c.maxSeqLen + c.blockSize - 1) / c.blockSize;
  plan.kv_cache = std::make_unique<schema::KvCacheSpecT>();
  plan.kv_cache->num_layers = c.layers;
  plan.kv_cache->num_kv_heads = c.kvHeads;
  plan.kv_cache->head_dim = c.headDim;
  plan.kv_cache->block_size = c.blockSize;
  plan.kv_cache->dtype = schema::DType::F32;
  plan.targets = {"cpu"};
  auto rank = std::make_unique<schema::RankT>();
  buildProgram(model, *rank);
  plan.ranks.push_back(std::move(rank));
  return plan;
}

Status writeTinyLlamaArtifact(const TinyLlama &model, const std::string &dir,
                              const std::function<void(schema::PlanT &)> &edit) {
  ArtifactContents contents;
  contents.plan = buildTinyLlamaPlan(model);
  if (edit)
    edit(contents.plan);
  contents.rankWeights.resize(1);
  for (const NamedTensor &t : model.weights) {
    WeightSource source;
    source.name = t.name;
    source.dtype = schema::DType::F32;
    source.shape = t.shape;
    const std::vector<float> *values = &t.values;
    source.produce = [values](std::vector<uint8_t> &bytes) {
      bytes.resize(values->size() * sizeof(float));
      std::memcpy(bytes.data(), values->data(), bytes.size());
      return okStatus();
    };
    contents.rankWeights[0].push_back(std::move(source));
  }
  return writeArtifact(contents, dir);
}

std::string makeTempDir(const std::string &prefix) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::unique_ptr<TinyLlama> TinyLlamaOnCpuTest::model_;
std::string TinyLlamaOnCpuTest::root_;
std::unique_ptr<Artifact> TinyLlamaOnCpuTest::artifact_;
std::unique_ptr<Device> TinyLlamaOnCpuTest::cpu_;

void TinyLlamaOnCpuTest::setUpTinyLlama(const std::string &tempPrefix,
                                        const TinyLlamaConfig &config) {
  model_ = std::make_unique<TinyLlama>(makeTinyLlama(config));
  root_ = makeTempDir(tempPrefix);
  const std::string dir = root_ + "/model.kiln";
  Status written = writeTinyLlamaArtifact(*model_, dir);
  ASSERT_TRUE(written.isOk()) << written.toString();
  auto artifact = Artifact::load(dir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  artifact_ = std::move(artifact).value();
  auto cpu = createDevice("cpu");
  ASSERT_TRUE(cpu.isOk());
  cpu_ = std::move(cpu).value();
}

void TinyLlamaOnCpuTest::TearDownTestSuite() {
  cpu_.reset();
  artifact_.reset();
  model_.reset();
  std::filesystem::remove_all(root_);
}

} // namespace kiln::rt::testing
