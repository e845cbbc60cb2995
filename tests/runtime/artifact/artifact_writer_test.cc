#include "runtime/artifact/artifact_writer.h"

#include "runtime/base/file.h"
#include "runtime/base/sha256.h"
#include "schema/version.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kiln::rt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return bytes;
}

WeightSource source(std::string name, schema::DType dtype, std::vector<uint64_t> shape,
                    std::vector<uint8_t> bytes) {
  WeightSource s{std::move(name), dtype, std::move(shape), {}};
  s.produce = [bytes = std::move(bytes)](std::vector<uint8_t> &out) {
    out = bytes;
    return okStatus();
  };
  return s;
}

class ArtifactWriterTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (fs::temp_directory_path() /
             ("kiln_writer_" + std::to_string(getpid()) + "_" + info->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/src");
    std::ofstream(root_ + "/src/tokenizer.json") << R"({"model": {"type": "BPE"}})";
    out_ = root_ + "/model.kiln";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Two ranks: rank 0 holds three tensors (12, 12 and 300 bytes), rank 1 one tensor.
  ArtifactContents contents(uint8_t seed = 1) {
    ArtifactContents c;
    c.plan.model = std::make_unique<schema::ModelInfoT>();
    c.plan.model->family = "llama";
    c.plan.model->architecture = "LlamaForCausalLM";
    c.plan.model->vocab_size = 16;
    c.plan.limits = std::make_unique<schema::CompiledLimitsT>();
    c.plan.limits->max_batch = 4;
    c.plan.limits->max_seq_len = 64;
    c.plan.tp = 2;
    c.plan.targets = {"cpu"};
    for (uint32_t r = 0; r < 2; ++r) {
      c.plan.ranks.push_back(std::make_unique<schema::RankT>());
      c.plan.ranks.back()->rank = r;
    }
    c.rankWeights.resize(2);
    c.rankWeights[0].push_back(source("a", schema::DType::F32, {3}, pattern(12, seed)));
    c.rankWeights[0].push_back(source("b", schema::DType::BF16, {2, 3}, pattern(12, seed + 50)));
    c.rankWeights[0].push_back(source("c", schema::DType::U8, {300}, pattern(300, seed + 100)));
    c.rankWeights[1].push_back(source("a", schema::DType::F32, {2}, pattern(8, seed + 150)));
    c.extraFiles = {root_ + "/src/tokenizer.json"};
    return c;
  }

  // Names in root_ other than the extra-file source dir: the artifact and any leftovers.
  std::vector<std::string> outputs() const {
    std::vector<std::string> names;
    for (const auto &entry : fs::directory_iterator(root_))
      if (entry.path().filename() != "src")
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root_;
  std::string out_;
};

TEST_F(ArtifactWriterTest, WritesVerifiablePlanAlignedWeightsAndManifest) {
  ArtifactContents c = contents();
  std::vector<std::string> messages;
  Status status = writeArtifact(c, out_, [&](const std::string &m) { messages.push_back(m); });
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(outputs(), std::vector<std::string>({"model.kiln"}));
  ASSERT_GE(messages.size(), 4u);
  EXPECT_EQ(messages[0], "weights.rank0.bin: 1/3 tensors, 0.0 MiB");
  EXPECT_EQ(messages[3], "weights.rank1.bin: 1/1 tensors, 0.0 MiB");

  auto planBytes = readFile(out_ + "/plan.kiln");
  ASSERT_TRUE(planBytes.isOk());
  const auto *data = reinterpret_cast<const uint8_t *>(planBytes->data());
  flatbuffers::Verifier verifier(data, planBytes->size());
  ASSERT_TRUE(schema::VerifyPlanBuffer(verifier));
  ASSERT_TRUE(schema::PlanBufferHasIdentifier(data));
  const schema::Plan *plan = schema::GetPlan(data);
  EXPECT_EQ(plan->schema_version(), kSchemaVersion);
  EXPECT_EQ(plan->compiler_version()->str(), kKilnVersion);
  ASSERT_EQ(plan->ranks()->size(), 2u);

  const std::vector<std::vector<uint64_t>> expectedOffsets = {{0, 256, 512}, {0}};
  const std::vector<uint64_t> expectedFileSizes = {812, 8};
  for (uint32_t r = 0; r < 2; ++r) {
    const schema::Rank *rank = plan->ranks()->Get(r);
    std::string fileName = "weights.rank" + std::to_string(r) + ".bin";
    EXPECT_EQ(rank->weights_file()->str(), fileName);
    EXPECT_EQ(rank->weights_file_size(), expectedFileSizes[r]);
    auto weights = readFile(out_ + "/" + fileName);
    ASSERT_TRUE(weights.isOk());
    ASSERT_EQ(weights->size(), expectedFileSizes[r]);
    ASSERT_EQ(rank->weights()->size(), c.rankWeights[r].size());
    for (uint32_t w = 0; w < rank->weights()->size(); ++w) {
      const schema::WeightEntry *entry = rank->weights()->Get(w);
      std::vector<uint8_t> expected;
      ASSERT_TRUE(c.rankWeights[r][w].produce(expected).isOk());
      EXPECT_EQ(entry->name()->str(), c.rankWeights[r][w].name);
      EXPECT_EQ(entry->dtype(), c.rankWeights[r][w].dtype);
      EXPECT_EQ(std::vector<uint64_t>(entry->shape()->begin(), entry->shape()->end()),
                c.rankWeights[r][w].shape);
      EXPECT_EQ(entry->offset(), expectedOffsets[r][w]);
      EXPECT_EQ(entry->offset() % kWeightAlignment, 0u);
      EXPECT_EQ(entry->size(), expected.size());
      EXPECT_EQ(entry->sha256()->str(), sha256Hex(expected.data(), expected.size()));
      EXPECT_EQ(weights->substr(entry->offset(), entry->size()),
                std::string(expected.begin(), expected.end()));
    }
  }
  // Padding between rank 0's tensors is zeros.
  auto rank0 = readFile(out_ + "/weights.rank0.bin");
  EXPECT_EQ(rank0->substr(12, 244), std::string(244, '\0'));
  EXPECT_EQ(rank0->substr(268, 244), std::string(244, '\0'));

  auto manifestText = readFile(out_ + "/manifest.json");
  ASSERT_TRUE(manifestText.isOk());
  Json manifest = Json::parse(*manifestText);
  EXPECT_EQ(manifest["kiln_version"], kKilnVersion);
  EXPECT_EQ(manifest["schema_version"], kSchemaVersion);
  EXPECT_EQ(manifest["model"]["family"], "llama");
  EXPECT_EQ(manifest["model"]["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(manifest["limits"]["max_batch"], 4);
  EXPECT_EQ(manifest["limits"]["max_seq_len"], 64);
  EXPECT_EQ(manifest["tp"], 2);
  EXPECT_EQ(manifest["targets"], Json::array({"cpu"}));
  std::vector<std::string> listed;
  for (const Json &file : manifest["files"]) {
    std::string name = file["name"].get<std::string>();
    listed.push_back(name);
    auto bytes = readFile(out_ + "/" + name);
    ASSERT_TRUE(bytes.isOk()) << name;
    EXPECT_EQ(file["size"].get<uint64_t>(), bytes->size()) << name;
    EXPECT_EQ(file["sha256"].get<std::string>(), sha256Hex(bytes->data(), bytes->size())) << name;
  }
  EXPECT_EQ(listed, std::vector<std::string>({"plan.kiln", "tokenizer.json", "weights.rank0.bin",
                                              "weights.rank1.bin"}));
  EXPECT_EQ(*readFile(out_ + "/tokenizer.json"), R"({"model": {"type": "BPE"}})");
}

TEST_F(ArtifactWriterTest, FailingProducerLeavesNothing) {
  ArtifactContents c = contents();
  c.rankWeights[0][1].produce = [](std::vector<uint8_t> &) {
    return dataLoss("checkpoint shard truncated");
  };
  Status status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("'b'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("checkpoint shard truncated"), std::string::npos);
  EXPECT_TRUE(outputs().empty()) << outputs().front();
}

TEST_F(ArtifactWriterTest, ProducedSizeMustMatchDTypeAndShape) {
  ArtifactContents c = contents();
  c.rankWeights[1][0] = source("norm", schema::DType::F16, {5}, pattern(8, 0));
  Status status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("weights.rank1.bin: tensor 'norm'"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("gave 8 bytes"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("is 10"), std::string::npos) << status.message();
  EXPECT_TRUE(outputs().empty());
}

TEST_F(ArtifactWriterTest, ExistingArtifactIsKeptWhenARewriteFailsAndReplacedWhenItSucceeds) {
  ArtifactContents first = contents(1);
  ASSERT_TRUE(writeArtifact(first, out_).isOk());
  auto originalPlan = readFile(out_ + "/plan.kiln");
  auto originalWeights = readFile(out_ + "/weights.rank0.bin");
  ASSERT_TRUE(originalPlan.isOk() && originalWeights.isOk());

  ArtifactContents failing = contents(2);
  failing.rankWeights[1][0].produce = [](std::vector<uint8_t> &) {
    return unavailable("disk full");
  };
  ASSERT_FALSE(writeArtifact(failing, out_).isOk());
  EXPECT_EQ(outputs(), std::vector<std::string>({"model.kiln"}));
  EXPECT_EQ(*readFile(out_ + "/plan.kiln"), *originalPlan);
  EXPECT_EQ(*readFile(out_ + "/weights.rank0.bin"), *originalWeights);

  ArtifactContents second = contents(3);
  ASSERT_TRUE(writeArtifact(second, out_ + "/").isOk());
  EXPECT_EQ(outputs(), std::vector<std::string>({"model.kiln"}));
  std::vector<uint8_t> expected = pattern(12, 3);
  EXPECT_EQ(readFile(out_ + "/weights.rank0.bin")->substr(0, 12),
            std::string(expected.begin(), expected.end()));
}

TEST_F(ArtifactWriterTest, RefusesToReplaceADirectoryThatIsNotAnArtifact) {
  fs::create_directories(out_);
  std::ofstream(out_ + "/notes.txt") << "mine";
  ArtifactContents c = contents();
  Status status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find(out_), std::string::npos);
  EXPECT_EQ(*readFile(out_ + "/notes.txt"), "mine");
  EXPECT_EQ(outputs(), std::vector<std::string>({"model.kiln"}));
}

TEST_F(ArtifactWriterTest, InconsistentContentsAreRejected) {
  ArtifactContents c = contents();
  c.rankWeights.pop_back();
  Status status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("rankWeights"), std::string::npos) << status.message();

  c = contents();
  c.extraFiles.push_back(root_ + "/src/missing.json");
  status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("missing.json"), std::string::npos) << status.message();

  c = contents();
  c.extraFiles.push_back(root_ + "/src/plan.kiln");
  status = writeArtifact(c, out_);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("reserved"), std::string::npos) << status.message();
  EXPECT_TRUE(outputs().empty());
}

} // namespace
} // namespace kiln::rt
