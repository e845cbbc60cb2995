// The loader rejects every kind of corrupted or inconsistent artifact with a message that names
// the file (and the tensor/op/buffer) and says what is wrong; a good artifact loads.
#include "runtime/artifact/artifact.h"
#include "runtime/artifact/artifact_writer.h"
#include "runtime/base/file.h"
#include "runtime/base/sha256.h"
#include "runtime/ops/plan_types.h"
#include "schema/version.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <unistd.h>

namespace kiln::rt {
namespace {

namespace fs = std::filesystem;
using schema::BufferKind;
using schema::RowScale;
using schema::StepInputKind;

constexpr uint32_t kVocab = 16;
constexpr uint32_t kHidden = 8;
constexpr uint32_t kMaxTokens = 8;
constexpr float kRopeTheta = 12345.678f; // a distinctive float to find inside plan.kiln

std::unique_ptr<schema::BufferT> makeBuffer(const std::string &name, BufferKind kind,
                                            schema::DType dtype, std::vector<uint64_t> shape,
                                            RowScale rows) {
  auto b = std::make_unique<schema::BufferT>();
  b->name = name;
  b->kind = kind;
  b->dtype = dtype;
  b->shape = std::move(shape);
  b->rows = rows;
  uint64_t n = 4;
  for (uint64_t d : b->shape)
    n *= d;
  b->size_bytes = n;
  return b;
}

void addOp(schema::RankT &rank, const std::string &name, schema::OpParamsUnion params,
           std::vector<uint32_t> inputs, std::vector<uint32_t> outputs) {
  auto op = std::make_unique<schema::OpT>();
  op->name = name;
  op->params = std::move(params);
  op->inputs = std::move(inputs);
  op->outputs = std::move(outputs);
  rank.program.push_back(std::move(op));
}

// The smallest valid plan: embed -> gather the logits rows -> lm_head.
schema::PlanT smallPlan() {
  schema::PlanT plan;
  plan.model = std::make_unique<schema::ModelInfoT>();
  plan.model->family = "llama";
  plan.model->vocab_size = kVocab;
  plan.model->rope_theta = kRopeTheta;
  plan.limits = std::make_unique<schema::CompiledLimitsT>();
  plan.limits->max_batch = 2;
  plan.limits->max_seq_len = 16;
  plan.limits->max_tokens_per_step = kMaxTokens;
  plan.limits->max_blocks_per_seq = 4;
  plan.kv_cache = std::make_unique<schema::KvCacheSpecT>();
  plan.kv_cache->num_layers = 1;
  plan.kv_cache->num_kv_heads = 1;
  plan.kv_cache->head_dim = 4;
  plan.kv_cache->block_size = 4;
  plan.targets = {"cpu"};
  auto rank = std::make_unique<schema::RankT>();
  using schema::DType;
  rank->buffers.push_back(
      makeBuffer("token_ids", BufferKind::StepInput, DType::I32, {kMaxTokens}, RowScale::Tokens));
  rank->buffers.back()->step_input = StepInputKind::TokenIds;
  rank->buffers.push_back(makeBuffer("logits_indices", BufferKind::StepInput, DType::I32,
                                     {kMaxTokens}, RowScale::Logits));
  rank->buffers.back()->step_input = StepInputKind::LogitsIndices;
  rank->buffers.push_back(
      makeBuffer("embed", BufferKind::Weight, DType::F32, {kVocab, kHidden}, RowScale::Fixed));
  rank->buffers.back()->weight = 0;
  rank->buffers.push_back(
      makeBuffer("lm_head", BufferKind::Weight, DType::F32, {kVocab, kHidden}, RowScale::Fixed));
  rank->buffers.back()->weight = 1;
  const uint64_t rowBytes = 4 * kMaxTokens * kHidden;
  for (auto [name, rows, width, offset] :
       {std::tuple{"hidden", RowScale::Tokens, kHidden, uint64_t{0}},
        std::tuple{"gathered", RowScale::Logits, kHidden, rowBytes},
        std::tuple{"logits", RowScale::Logits, kVocab, 2 * rowBytes}}) {
    rank->buffers.push_back(
        makeBuffer(name, BufferKind::Activation, DType::F32, {kMaxTokens, width}, rows));
    rank->buffers.back()->arena_offset = offset;
  }
  rank->arena_bytes = 2 * rowBytes + 4 * kMaxTokens * kVocab;
  rank->logits = 6;
  schema::OpParamsUnion embedding, gather, linear;
  embedding.Set(schema::EmbeddingParamsT());
  gather.Set(schema::GatherRowsParamsT());
  linear.Set(schema::LinearParamsT());
  addOp(*rank, "embed", embedding, {0, 2}, {4});
  addOp(*rank, "gather", gather, {4, 1}, {5});
  addOp(*rank, "lm_head", linear, {5, 3}, {6});
  plan.ranks.push_back(std::move(rank));
  return plan;
}

std::vector<float> tensorValues(int which) {
  std::vector<float> values(kVocab * kHidden);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 0.25f * float(i % 13) - 1.0f + float(which);
  return values;
}

class ArtifactTest : public ::testing::Test {
protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("kiln-artifact-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes smallPlan() (after `edit`) with the artifact writer; returns the directory.
  std::string write(const std::function<void(schema::PlanT &)> &edit = {}) {
    ArtifactContents contents;
    contents.plan = smallPlan();
    if (edit)
      edit(contents.plan);
    contents.rankWeights.resize(1);
    for (int w = 0; w < 2; ++w) {
      WeightSource source{w == 0 ? "embed.weight" : "lm_head.weight",
                          schema::DType::F32,
                          {kVocab, kHidden},
                          nullptr};
      source.produce = [w](std::vector<uint8_t> &bytes) {
        std::vector<float> values = tensorValues(w);
        bytes.resize(values.size() * 4);
        std::memcpy(bytes.data(), values.data(), bytes.size());
        return okStatus();
      };
      contents.rankWeights[0].push_back(std::move(source));
    }
    std::string dir = (root_ / ("model" + std::to_string(count_++) + ".kiln")).string();
    Status status = writeArtifact(contents, dir);
    EXPECT_TRUE(status.isOk()) << status.toString();
    return dir;
  }

  static std::string readBytes(const std::string &path) {
    auto bytes = readFile(path);
    EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
    return bytes.isOk() ? *bytes : std::string();
  }
  static void writeBytes(const std::string &path, const std::string &bytes) {
    ASSERT_TRUE(writeFileAtomic(path, bytes).isOk());
  }
  static void flipByte(const std::string &path, size_t position) {
    std::string bytes = readBytes(path);
    ASSERT_LT(position, bytes.size());
    bytes[position] = static_cast<char>(bytes[position] ^ 0x5a);
    writeBytes(path, bytes);
  }
  // The load error's message; fails the test when the load succeeds.
  static std::string loadError(const std::string &dir, LoadOptions options = {}) {
    auto artifact = Artifact::load(dir, options);
    EXPECT_FALSE(artifact.isOk()) << "loaded a bad artifact: " << dir;
    return artifact.isOk() ? std::string() : artifact.status().message();
  }

  fs::path root_;
  int count_ = 0;
};

TEST_F(ArtifactTest, GoodArtifactLoads) {
  std::string dir = write();
  auto artifact = Artifact::load(dir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  const Artifact &a = **artifact;
  EXPECT_EQ(a.plan().schema_version(), kSchemaVersion);
  EXPECT_EQ(a.plan().model()->vocab_size(), kVocab);
  EXPECT_EQ(a.numRanks(), 1);
  EXPECT_EQ(a.directory(), dir);
  EXPECT_EQ(a.rank(0).program()->size(), 3u);
  EXPECT_NE(a.manifestJson().find("\"plan.kiln\""), std::string::npos);
  for (int w = 0; w < 2; ++w) {
    std::span<const uint8_t> bytes = a.weightBytes(0, w);
    std::vector<float> expected = tensorValues(w);
    ASSERT_EQ(bytes.size(), expected.size() * 4);
    EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), bytes.size()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % kWeightAlignment, 0u);
  }
  EXPECT_TRUE(a.weightBytes(0, 2).empty());
  EXPECT_TRUE(a.weightBytes(1, 0).empty());
}

TEST_F(ArtifactTest, MissingDirectoryIsNotFound) {
  auto artifact = Artifact::load((root_ / "nope.kiln").string());
  ASSERT_FALSE(artifact.isOk());
  EXPECT_EQ(artifact.status().code(), StatusCode::kNotFound);
  EXPECT_NE(artifact.status().message().find("nope.kiln/plan.kiln"), std::string::npos);
}

TEST_F(ArtifactTest, FlippedPlanBytesAreCaughtByTheManifestHash) {
  std::string good = write();
  std::string plan = readBytes(good + "/plan.kiln");
  float theta = kRopeTheta;
  size_t floatAt = plan.find(std::string(reinterpret_cast<const char *>(&theta), 4));
  ASSERT_NE(floatAt, std::string::npos) << "rope_theta not found in plan.kiln";
  // The root offset, the middle of a float (the verifier cannot notice), the middle of the file,
  // the last byte.
  for (size_t position : {size_t(0), floatAt + 2, plan.size() / 2, plan.size() - 1}) {
    SCOPED_TRACE("position " + std::to_string(position));
    std::string dir = (root_ / ("flip" + std::to_string(position))).string();
    fs::copy(good, dir);
    flipByte(dir + "/plan.kiln", position);
    std::string message = loadError(dir);
    EXPECT_NE(message.find("plan.kiln: sha256"), std::string::npos) << message;
    EXPECT_NE(message.find("does not match manifest.json"), std::string::npos) << message;
  }
}

TEST_F(ArtifactTest, FlippedWeightsByteNamesTheTensor) {
  std::string dir = write();
  auto good = Artifact::load(dir);
  ASSERT_TRUE(good.isOk());
  uint64_t offset = (*good)->rank(0).weights()->Get(1)->offset();
  good = good.status(); // unmap before editing
  flipByte(dir + "/weights.rank0.bin", offset + 17);
  std::string message = loadError(dir);
  EXPECT_NE(message.find("weights.rank0.bin: tensor 'lm_head.weight'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("sha256"), std::string::npos) << message;
  LoadOptions noHashes;
  noHashes.verifyWeights = false;
  EXPECT_TRUE(Artifact::load(dir, noHashes).isOk());
}

TEST_F(ArtifactTest, TruncatedWeightsFile) {
  std::string dir = write();
  std::string bytes = readBytes(dir + "/weights.rank0.bin");
  writeBytes(dir + "/weights.rank0.bin", bytes.substr(0, 1000));
  EXPECT_EQ(loadError(dir), "weights.rank0.bin is 1000 bytes, the plan expects " +
                                std::to_string(bytes.size()) + ": truncated file?");
}

TEST_F(ArtifactTest, TruncatedPlan) {
  std::string dir = write();
  std::string bytes = readBytes(dir + "/plan.kiln");
  writeBytes(dir + "/plan.kiln", bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(loadError(dir).find("plan.kiln: sha256"), std::string::npos);
  writeBytes(dir + "/plan.kiln", bytes.substr(0, 6));
  EXPECT_NE(loadError(dir).find("missing file identifier \"KILN\""), std::string::npos);
}

TEST_F(ArtifactTest, MissingManifest) {
  std::string dir = write();
  fs::remove(dir + "/manifest.json");
  std::string message = loadError(dir);
  EXPECT_NE(message.find("manifest.json is required to check plan.kiln"), std::string::npos)
      << message;
}

TEST_F(ArtifactTest, WrongFileIdentifier) {
  std::string dir = write();
  std::string bytes = readBytes(dir + "/plan.kiln");
  bytes.replace(4, 4, "GGUF");
  writeBytes(dir + "/plan.kiln", bytes);
  std::string message = loadError(dir);
  EXPECT_NE(message.find("plan.kiln in '" + dir + "': missing file identifier \"KILN\""),
            std::string::npos)
      << message;
}

// A shape whose 8-byte elements sit 4 bytes off their alignment passes the FlatBuffers verifier
// (it checks a vector's 4-byte length only); reading it would be a misaligned load. Found by
// tests/fuzz/artifact_fuzz (docs/reliability.md, fix #10). Here buffer 0's shape is pointed at a
// copy appended to plan.kiln with its elements at 4 mod 8, and the manifest's hash follows.
TEST_F(ArtifactTest, MisalignedShapeIsRefused) {
  auto hashOf = [](const std::string &s) {
    return sha256Hex({reinterpret_cast<const uint8_t *>(s.data()), s.size()});
  };
  std::string dir = write();
  std::string bytes = readBytes(dir + "/plan.kiln");
  const std::string oldHash = hashOf(bytes);
  const auto *start = reinterpret_cast<const uint8_t *>(bytes.data());
  const schema::Buffer *buffer = schema::GetPlan(start)->ranks()->Get(0)->buffers()->Get(0);
  // The shape field: the table's uoffset that leads to the shape vector (its length prefix).
  const size_t vectorAt = buffer->shape()->Data() - sizeof(uint32_t) - start;
  const size_t tableAt = reinterpret_cast<const uint8_t *>(buffer) - start;
  size_t fieldAt = 0;
  for (size_t at = tableAt; at < tableAt + 64 && at + 4 <= bytes.size(); at += 4) {
    uint32_t offset;
    std::memcpy(&offset, start + at, sizeof(offset));
    if (at + offset == vectorAt)
      fieldAt = at;
  }
  ASSERT_NE(fieldAt, 0u) << "buffer 0's shape field not found";
  const uint32_t dims = buffer->shape()->size();
  std::string copy(sizeof(uint32_t) + 8 * size_t(dims), '\0');
  std::memcpy(copy.data(), &dims, sizeof(dims));
  std::memcpy(copy.data() + sizeof(dims), buffer->shape()->Data(), 8 * size_t(dims));
  bytes.resize((bytes.size() + 7) / 8 * 8, '\0'); // the length at 0 mod 8: elements at 4 mod 8
  const uint32_t relative = static_cast<uint32_t>(bytes.size() - fieldAt);
  bytes += copy;
  std::memcpy(bytes.data() + fieldAt, &relative, sizeof(relative));
  writeBytes(dir + "/plan.kiln", bytes);
  std::string manifest = readBytes(dir + "/manifest.json");
  const size_t hashAt = manifest.find(oldHash);
  ASSERT_NE(hashAt, std::string::npos);
  manifest.replace(hashAt, oldHash.size(), hashOf(bytes));
  writeBytes(dir + "/manifest.json", manifest);
  const std::string message = loadError(dir);
  EXPECT_NE(message.find("plan.kiln: rank 0: buffer 0 '"), std::string::npos) << message;
  EXPECT_NE(message.find("': shape is not 8-byte aligned: the plan is corrupted"),
            std::string::npos)
      << message;
}

TEST_F(ArtifactTest, NewerSchemaVersion) {
  std::string dir = write([](schema::PlanT &plan) {
    plan.schema_version = kSchemaVersion + 1;
    plan.compiler_version = "9.9.9";
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: artifact schema version " +
                                std::to_string(kSchemaVersion + 1) + "; this kiln reads " +
                                std::to_string(kMinSchemaVersion) + " to " +
                                std::to_string(kSchemaVersion) +
                                ": the artifact was compiled by kiln 9.9.9; upgrade kiln to >= "
                                "9.9.9 to load it");
}

// Version-1 plans (before sliding windows and rope modes) read the same: every new field has the
// default that computes what version 1 did.
TEST_F(ArtifactTest, OlderReadableSchemaVersionLoads) {
  std::string dir = write([](schema::PlanT &plan) { plan.schema_version = kMinSchemaVersion; });
  auto artifact = Artifact::load(dir);
  EXPECT_TRUE(artifact.isOk()) << artifact.status().toString();
}

TEST_F(ArtifactTest, OpBufferIndexOutOfRange) {
  std::string dir = write([](schema::PlanT &plan) { plan.ranks[0]->program[1]->inputs[0] = 99; });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: op 1 'gather' (GatherRows): input 0 refers to "
                            "buffer 99, out of range (7 buffers)");
}

TEST_F(ArtifactTest, OpWithWrongInputCount) {
  std::string dir =
      write([](schema::PlanT &plan) { plan.ranks[0]->program[2]->inputs.pop_back(); });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: op 2 'lm_head' (Linear): has 1 inputs and 1 "
                            "outputs; this op kind requires 2 and 1");
}

TEST_F(ArtifactTest, OpWithMismatchedWidths) {
  std::string dir = write([](schema::PlanT &plan) { plan.ranks[0]->program[2]->inputs[0] = 4; });
  // Linear over `hidden` (Tokens rows) into `logits` (Logits rows): rows rules differ.
  EXPECT_NE(loadError(dir).find("op 2 'lm_head' (Linear): x(rows, in), W[out, in]"),
            std::string::npos);
}

TEST_F(ArtifactTest, ActivationBeyondArena) {
  std::string dir = write([](schema::PlanT &plan) { plan.ranks[0]->arena_bytes -= 4; });
  std::string message = loadError(dir);
  EXPECT_NE(message.find("plan.kiln: rank 0: buffer 6 'logits': activation [512, +512) lies "
                         "beyond the arena (arena_bytes 1020)"),
            std::string::npos)
      << message;
}

// --dtype bf16 (plan.fbs "Dtypes"): every activation but the logits in activation_dtype, the logits
// F32, the KV cache in a float type.
void makeBf16(schema::PlanT &plan) {
  plan.activation_dtype = schema::DType::BF16;
  plan.kv_cache->dtype = schema::DType::BF16;
  for (auto &b : plan.ranks[0]->buffers)
    if (b->kind == BufferKind::Activation && b->name != "logits")
      b->dtype = schema::DType::BF16;
}

TEST_F(ArtifactTest, HalfActivationPlanLoads) {
  auto artifact = Artifact::load(write(makeBf16));
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  EXPECT_EQ((*artifact)->plan().activation_dtype(), schema::DType::BF16);
  EXPECT_EQ((*artifact)->rank(0).buffers()->Get(5)->dtype(), schema::DType::BF16);
  EXPECT_EQ((*artifact)->rank(0).buffers()->Get(6)->dtype(), schema::DType::F32);
}

TEST_F(ArtifactTest, ActivationDtypeMustBeThePlans) {
  std::string dir = write([](schema::PlanT &plan) {
    makeBf16(plan);
    plan.ranks[0]->buffers[5]->dtype = schema::DType::F32;
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: buffer 5 'gathered' has dtype F32 but the plan's "
                            "activation_dtype is BF16; every activation but the logits is stored "
                            "in activation_dtype");
  dir = write([](schema::PlanT &plan) { plan.ranks[0]->buffers[4]->dtype = schema::DType::F16; });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: buffer 4 'hidden' has dtype F16 but the plan's "
                            "activation_dtype is F32; every activation but the logits is stored "
                            "in activation_dtype");
}

TEST_F(ArtifactTest, LogitsMustBeF32) {
  std::string dir = write([](schema::PlanT &plan) {
    makeBf16(plan);
    plan.ranks[0]->buffers[6]->dtype = schema::DType::BF16;
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: buffer 6 'logits' holds logits but has dtype "
                            "BF16; logits are F32 whatever activation_dtype is");
}

// F8E4M3 (--kv-dtype fp8) is a KV cache's dtype only.
TEST_F(ArtifactTest, KvAndActivationDtypesMustBeFloat) {
  std::string dir = write([](schema::PlanT &plan) { plan.kv_cache->dtype = schema::DType::I32; });
  EXPECT_EQ(loadError(dir),
            "plan.kiln: kv_cache.dtype is I32; it must be F32, F16, BF16 or F8E4M3");
  dir = write([](schema::PlanT &plan) { plan.activation_dtype = schema::DType::U8; });
  EXPECT_EQ(loadError(dir), "plan.kiln: activation_dtype is U8; it must be F32, F16 or BF16");
  dir = write([](schema::PlanT &plan) { plan.activation_dtype = schema::DType::F8E4M3; });
  EXPECT_EQ(loadError(dir), "plan.kiln: activation_dtype is F8E4M3; it must be F32, F16 or BF16");
}

// kv_cache.k_scales / v_scales (calibrated fp8 KV-cache scales): one finite positive value per
// layer, and only for an F8E4M3 cache.
TEST_F(ArtifactTest, KvCacheScalesAreChecked) {
  auto fp8 = [](schema::PlanT &plan) { plan.kv_cache->dtype = schema::DType::F8E4M3; };
  std::string dir = write([&](schema::PlanT &plan) {
    fp8(plan);
    plan.kv_cache->k_scales = {0.5f};
    plan.kv_cache->v_scales = {0.25f};
  });
  auto scaled = Artifact::load(dir);
  EXPECT_TRUE(scaled.isOk()) << scaled.status().toString();
  dir = write([](schema::PlanT &plan) { plan.kv_cache->k_scales = {0.5f}; });
  EXPECT_EQ(loadError(dir), "plan.kiln: kv_cache.k_scales is set for a F32 cache; scales apply "
                            "only to an F8E4M3 cache");
  dir = write([&](schema::PlanT &plan) {
    fp8(plan);
    plan.kv_cache->v_scales = {0.5f, 0.5f};
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: kv_cache.v_scales holds 2 values; the cache has 1 layers");
  dir = write([&](schema::PlanT &plan) {
    fp8(plan);
    plan.kv_cache->k_scales = {0.0f};
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: kv_cache.k_scales[0] is 0.000000; a scale must be finite "
                            "and positive");
}

// KV cache groups (plan.fbs "KV cache groups"): every layer in exactly one group, and a step
// input's kv_group naming one of them.
TEST_F(ArtifactTest, KvCacheGroupsAreChecked) {
  auto group = [](uint32_t window, std::vector<uint32_t> layers) {
    auto g = std::make_unique<schema::KvCacheGroupT>();
    g->sliding_window = window;
    g->layers = std::move(layers);
    return g;
  };
  std::string dir = write([&](schema::PlanT &plan) {
    plan.kv_cache->num_layers = 2;
    plan.kv_cache->groups.push_back(group(0, {0}));
    plan.kv_cache->groups.push_back(group(8, {0}));
  });
  EXPECT_EQ(loadError(dir),
            "plan.kiln: kv_cache.groups[1] names layer 0, already in kv_cache.groups[0]");
  dir = write([&](schema::PlanT &plan) {
    plan.kv_cache->num_layers = 2;
    plan.kv_cache->groups.push_back(group(8, {1}));
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: layer 0 is in no kv_cache group");
  dir = write([&](schema::PlanT &plan) { plan.kv_cache->num_layers = 3000000000u; });
  EXPECT_EQ(loadError(dir), "plan.kiln: kv_cache.num_layers 3000000000 is more than any model "
                            "has (at most 65536)");
  dir = write([&](schema::PlanT &plan) { plan.ranks[0]->buffers[0]->kv_group = 1; });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: buffer 0 'token_ids': only BlockTables and "
                            "SlotMapping step inputs have a kv_group");
  dir = write([&](schema::PlanT &plan) {
    plan.kv_cache->groups.push_back(group(0, {0}));
    plan.ranks[0]->buffers[0]->kv_group = 1;
    plan.ranks[0]->buffers[0]->step_input = StepInputKind::SlotMapping;
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: buffer 0 'token_ids': kv_group 1 is not a group "
                            "of kv_cache.groups");
}

// A tp 1 plan's embedding holds the whole table, so a vocab_start (a shard's first id) is refused.
TEST_F(ArtifactTest, EmbeddingVocabStartNeedsTensorParallelism) {
  std::string dir = write([](schema::PlanT &plan) {
    plan.ranks[0]->program[0]->params.AsEmbeddingParams()->vocab_start = 2;
  });
  EXPECT_EQ(loadError(dir), "plan.kiln: rank 0: op 0 'embed' (Embedding): vocab_start is 2; a tp "
                            "1 plan holds the whole table");
}

// A buffer that says its weight is quantized (schema/plan.fbs Q8) when the weight is not.
TEST_F(ArtifactTest, QuantizedBufferMustMatchItsWeight) {
  std::string dir = write([](schema::PlanT &plan) {
    for (auto &b : plan.ranks[0]->buffers)
      if (b->name == "embed") {
        b->dtype = schema::DType::Q8;
        b->group_size = 32;
      }
  });
  std::string message = loadError(dir);
  EXPECT_NE(message.find("'embed': dtype/group_size/shape differ from weight 'embed.weight'"),
            std::string::npos)
      << message;
}

// Bytes of a quantized matrix (runtime/base/quant_layout.h: 64-byte aligned sections), and the
// shapes and groups the plan checks refuse.
TEST(QuantWeightSize, LayoutBytesAndRefusals) {
  EXPECT_EQ(quantWeightSize(schema::DType::Q4M, 3, 64, 32).bytes, 204u); // 96 | 12 | 12
  EXPECT_EQ(quantWeightSize(schema::DType::Q8, 2, 96, 96).bytes, 196u);  // 192 | 4
  EXPECT_EQ(quantWeightSize(schema::DType::Q4, 4, 128, 64).bytes, 256u + 16u);
  EXPECT_NE(quantWeightSize(schema::DType::Q4, 4, 128, 48).error.find("group_size (48)"),
            std::string::npos);
  EXPECT_NE(quantWeightSize(schema::DType::Q8, 4, 96, 64).error.find("divides cols"),
            std::string::npos);
  EXPECT_NE(quantWeightSize(schema::DType::Q8, 0, 64, 32).error, "");
  EXPECT_NE(quantWeightSize(schema::DType::F32, 4, 64, 32).error.find("not a quantized dtype"),
            std::string::npos);
  EXPECT_EQ(dtypeName(schema::DType::Q4M), "Q4M");
}

TEST_F(ArtifactTest, BadLoadRank) {
  std::string dir = write();
  LoadOptions options;
  options.rank = 1;
  EXPECT_EQ(loadError(dir, options),
            "load option rank 1 is out of range: the artifact has 1 rank(s)");
  options.rank = 0;
  auto artifact = Artifact::load(dir, options);
  ASSERT_TRUE(artifact.isOk());
  EXPECT_TRUE((*artifact)->hasWeights(0));
}

} // namespace
} // namespace kiln::rt
