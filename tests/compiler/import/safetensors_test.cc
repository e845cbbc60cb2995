#include "compiler/import/safetensors.h"

#include "runtime/base/file.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kAssets = KILN_ASSETS_DIR;

// Raw bytes of a safetensors file: 8-byte little-endian header length, header, data.
std::string safetensorsBytes(const std::string &header, const std::string &data) {
  uint64_t length = header.size();
  std::string out(reinterpret_cast<const char *>(&length), 8);
  return out + header + data;
}

template <typename T> std::string bytesOf(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() /
            ("kiln_safetensors_" + std::to_string(getpid()) + "_" + info->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void writeFile(const std::string &name, const std::string &bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  void writeModel(const Json &header, const std::string &data) {
    writeFile("model.safetensors", safetensorsBytes(header.dump(), data));
  }
  // Opening must fail with a message naming the file and each of `named`.
  void expectOpenError(std::initializer_list<std::string> named,
                       const std::string &file = "model.safetensors") {
    auto checkpoint = SafetensorsCheckpoint::open(dir_);
    ASSERT_FALSE(checkpoint.isOk());
    const std::string &message = checkpoint.status().message();
    EXPECT_NE(message.find(dir_ + "/" + file), std::string::npos) << message;
    for (const std::string &part : named)
      EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "': " << message;
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, TinyStoriesTiedEmbeddingAlias) {
  std::string model = kAssets + "/models/tinystories-656K-hf";
  if (!fileExists(model + "/model.safetensors"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto checkpoint = SafetensorsCheckpoint::open(model);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  EXPECT_EQ(checkpoint->names().size(), 20u); // stored only: no embed_tokens entry
  EXPECT_TRUE(checkpoint->contains("model.embed_tokens.weight"));
  EXPECT_FALSE(checkpoint->contains("format")); // metadata that names no tensor is no alias
  auto embed = checkpoint->info("model.embed_tokens.weight");
  ASSERT_TRUE(embed.isOk());
  EXPECT_EQ((*embed)->name, "lm_head.weight");
  EXPECT_EQ((*embed)->shape, std::vector<int64_t>({2048, 128}));
  EXPECT_EQ((*embed)->dtype, TensorDType::kF32);
  auto embedBytes = checkpoint->rawBytes("model.embed_tokens.weight");
  auto headBytes = checkpoint->rawBytes("lm_head.weight");
  ASSERT_TRUE(embedBytes.isOk() && headBytes.isOk());
  ASSERT_EQ(embedBytes->size(), 2048u * 128u * 4u);
  EXPECT_EQ(std::memcmp(embedBytes->data(), headBytes->data(), embedBytes->size()), 0);
  auto embedF32 = checkpoint->readF32("model.embed_tokens.weight");
  auto headF32 = checkpoint->readF32("lm_head.weight");
  ASSERT_TRUE(embedF32.isOk() && headF32.isOk());
  EXPECT_EQ(*embedF32, *headF32);
  auto norm = checkpoint->info("model.norm.weight");
  ASSERT_TRUE(norm.isOk());
  EXPECT_EQ((*norm)->shape, std::vector<int64_t>({128}));
  EXPECT_EQ((*norm)->offset, 8u + 2160u + 2623488u);
}

TEST_F(SafetensorsTest, Stories260KMetadataWithoutAliases) {
  std::string model = kAssets + "/models/stories260K-hf";
  if (!fileExists(model + "/model.safetensors"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto checkpoint = SafetensorsCheckpoint::open(model);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  EXPECT_TRUE(checkpoint->contains("model.embed_tokens.weight"));
  EXPECT_FALSE(checkpoint->contains("lm_head.weight")); // tied, and not aliased in this file
  EXPECT_FALSE(checkpoint->contains("source"));
  EXPECT_EQ(checkpoint->names().size(), 5u * 9u + 2u);
}

TEST_F(SafetensorsTest, HalfPrecisionConvertsExactly) {
  // F16: 1, -2, 1/3 rounded, max finite, smallest subnormal, +inf.
  std::string f16 = bytesOf<uint16_t>({0x3c00, 0xc000, 0x3555, 0x7bff, 0x0001, 0x7c00});
  // BF16: 1, -3, 1/3 rounded, +inf.
  std::string bf16 = bytesOf<uint16_t>({0x3f80, 0xc040, 0x3eab, 0x7f80});
  std::string f32 = bytesOf<float>({0.5f, -7.25f});
  // f32 starts at byte 20 of the data section: not 4-aligned in the file on purpose.
  Json header = {{"h", {{"dtype", "F16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}},
                 {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {12, 20}}}},
                 {"f", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {20, 28}}}}};
  writeModel(header, f16 + bf16 + f32);
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  auto h = checkpoint->readF32("h");
  ASSERT_TRUE(h.isOk());
  EXPECT_EQ(*h, std::vector<float>(
                    {1.0f, -2.0f, 0.333251953125f, 65504.0f, 5.9604644775390625e-08f, INFINITY}));
  auto b = checkpoint->readF32("b");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(*b, std::vector<float>({1.0f, -3.0f, 0.333984375f, INFINITY}));
  auto f = checkpoint->readF32("f");
  ASSERT_TRUE(f.isOk());
  EXPECT_EQ(*f, std::vector<float>({0.5f, -7.25f}));
  auto info = checkpoint->info("h");
  ASSERT_TRUE(info.isOk());
  EXPECT_EQ((*info)->numElements(), 6);
  EXPECT_EQ((*info)->size, 12u);
  EXPECT_STREQ(tensorDTypeName((*info)->dtype), "F16");
  EXPECT_EQ(tensorDTypeSize(TensorDType::kBF16), 2u);
}

// Found by tests/fuzz/safetensors_fuzz (UBSan): readF32 of a zero-element F32 tensor handed the
// empty vector's null data() to memcpy.
TEST_F(SafetensorsTest, EmptyTensorsReadAsEmpty) {
  writeModel({{"e", {{"dtype", "F32"}, {"shape", {0, 5}}, {"data_offsets", {0, 0}}}},
              {"h", {{"dtype", "F16"}, {"shape", {0}}, {"data_offsets", {0, 0}}}}},
             "");
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  for (const char *name : {"e", "h"}) {
    auto values = checkpoint->readF32(name);
    ASSERT_TRUE(values.isOk()) << name << ": " << values.status().toString();
    EXPECT_TRUE(values->empty()) << name;
    EXPECT_EQ((*checkpoint->info(name))->numElements(), 0) << name;
  }
}

TEST_F(SafetensorsTest, ShardedIndex) {
  Json shard1 = {{"__metadata__", {{"format", "pt"}, {"embed", "a"}}},
                 {"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  Json shard2 = {{"b", {{"dtype", "BF16"}, {"shape", {1, 2}}, {"data_offsets", {0, 4}}}},
                 {"c", {{"dtype", "F32"}, {"shape", Json::array()}, {"data_offsets", {4, 8}}}}};
  writeFile("model-00001-of-00002.safetensors",
            safetensorsBytes(shard1.dump(), bytesOf<float>({1.5f, 2.5f})));
  writeFile("model-00002-of-00002.safetensors",
            safetensorsBytes(shard2.dump(),
                             bytesOf<uint16_t>({0x4000, 0x4040}) + bytesOf<float>({-4.0f})));
  Json index = {{"metadata", {{"total_size", 20}}},
                {"weight_map",
                 {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00002-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}}}};
  writeFile("model.safetensors.index.json", index.dump());
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  EXPECT_EQ(checkpoint->names(), std::vector<std::string>({"a", "b", "c"}));
  EXPECT_EQ(*checkpoint->readF32("a"), std::vector<float>({1.5f, 2.5f}));
  EXPECT_EQ(*checkpoint->readF32("b"), std::vector<float>({2.0f, 3.0f}));
  EXPECT_EQ(*checkpoint->readF32("c"), std::vector<float>({-4.0f}));
  EXPECT_EQ(*checkpoint->readF32("embed"), std::vector<float>({1.5f, 2.5f})); // alias
  auto a = checkpoint->info("a");
  auto c = checkpoint->info("c");
  ASSERT_TRUE(a.isOk() && c.isOk());
  EXPECT_NE((*a)->fileIndex, (*c)->fileIndex);
  EXPECT_EQ(checkpoint->filePath(**c), dir_ + "/model-00002-of-00002.safetensors");

  // The index is what is trusted: a shard it names must exist ...
  index["weight_map"]["d"] = "model-00003-of-00003.safetensors";
  writeFile("model.safetensors.index.json", index.dump());
  expectOpenError({"model-00003-of-00003.safetensors"}, "model.safetensors.index.json");
  // ... and must hold the tensors it lists there.
  index["weight_map"].erase("d");
  index["weight_map"]["a"] = "model-00002-of-00002.safetensors";
  writeFile("model.safetensors.index.json", index.dump());
  expectOpenError({"'a'"}, "model.safetensors.index.json");
  index["weight_map"]["a"] = "../elsewhere.safetensors";
  writeFile("model.safetensors.index.json", index.dump());
  expectOpenError({"'a'", "../elsewhere"}, "model.safetensors.index.json");
  writeFile("model.safetensors.index.json", "{\"weight_map\": [");
  expectOpenError({"JSON"}, "model.safetensors.index.json");
}

TEST_F(SafetensorsTest, MissingFilesAndTensors) {
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_FALSE(checkpoint.isOk());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kNotFound);
  EXPECT_NE(checkpoint.status().message().find(dir_), std::string::npos);
  writeModel({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}},
             bytesOf<float>({1.0f}));
  checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk());
  auto missing = checkpoint->readF32("model.norm.weight");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'model.norm.weight'"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedFiles) {
  writeFile("model.safetensors", "abc");
  expectOpenError({"too small"});
  writeFile("model.safetensors", safetensorsBytes("{}", "").substr(0, 8) + "{");
  expectOpenError({"header length 2", "larger than the file"});
}

TEST_F(SafetensorsTest, HeaderThatIsNotAJsonObject) {
  writeFile("model.safetensors", safetensorsBytes("{\"a\": {", "    "));
  expectOpenError({"JSON"});
  writeFile("model.safetensors", safetensorsBytes("[1, 2]", ""));
  expectOpenError({"JSON"});
  writeModel({{"a", 5}}, "");
  expectOpenError({"'a'"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  std::string data = bytesOf<float>({1.0f, 2.0f});
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}}}, data);
  expectOpenError({"'w'", "[0, 12]", "outside the data section (8 bytes)"});
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}}, data);
  expectOpenError({"'w'", "outside"});
  // Negative offsets would point into the header.
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {-8, 0}}}}}, data);
  expectOpenError({"'w'", "data_offsets"});
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0}}}}}, data);
  expectOpenError({"'w'", "data_offsets"});
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}},
              {"v", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {2, 6}}}}},
             data);
  expectOpenError({"'w'", "'v'", "overlap"});
}

TEST_F(SafetensorsTest, ShapeDTypeSizeMismatch) {
  std::string data = bytesOf<float>({1.0f, 2.0f});
  writeModel({{"w", {{"dtype", "F16"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}}, data);
  expectOpenError({"'w'", "[2]", "F16", "needs 4 bytes", "span 8"});
  writeModel({{"w", {{"dtype", "F32"}, {"shape", {2, -1}}, {"data_offsets", {0, 8}}}}}, data);
  expectOpenError({"'w'", "shape"});
  writeModel(
      {{"w",
        {{"dtype", "F32"}, {"shape", {4294967296ull, 4294967296ull}}, {"data_offsets", {0, 8}}}}},
      data);
  expectOpenError({"'w'", "overflows"});
}

TEST_F(SafetensorsTest, UnknownDTypeNamesTensorAndDType) {
  writeModel(
      {{"model.layers.0.q.qweight", {{"dtype", "I8"}, {"shape", {8}}, {"data_offsets", {0, 8}}}}},
      bytesOf<float>({1.0f, 2.0f}));
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_FALSE(checkpoint.isOk());
  EXPECT_EQ(checkpoint.status().code(), StatusCode::kUnimplemented);
  expectOpenError({"'model.layers.0.q.qweight'", "'I8'", "F32, F16, BF16, I32 and F8_E4M3"});
}

// An F8_E4M3 tensor opens (one byte a value, raw bytes as stored) but is no weight on its own:
// readF32 refuses it, naming the fp8 quantization_config its scales come with
// (compiler/import/hf_fp8_checkpoint.h reads the pair).
TEST_F(SafetensorsTest, Fp8TensorsOpenButNeedTheirScales) {
  writeModel({{"model.layers.0.q.weight",
               {{"dtype", "F8_E4M3"}, {"shape", {2, 4}}, {"data_offsets", {0, 8}}}}},
             std::string("\x38\x40\xb8\x00\x7e\x01\x44\x30", 8));
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  auto info = checkpoint->info("model.layers.0.q.weight");
  ASSERT_TRUE(info.isOk());
  EXPECT_EQ((*info)->dtype, TensorDType::kF8E4M3);
  EXPECT_EQ(tensorDTypeSize((*info)->dtype), 1u);
  auto bytes = checkpoint->rawBytes("model.layers.0.q.weight");
  ASSERT_TRUE(bytes.isOk());
  EXPECT_EQ(std::string(bytes->begin(), bytes->end()),
            std::string("\x38\x40\xb8\x00\x7e\x01\x44\x30", 8));
  auto values = checkpoint->readF32("model.layers.0.q.weight");
  ASSERT_FALSE(values.isOk());
  EXPECT_NE(values.status().message().find("F8_E4M3 values"), std::string::npos)
      << values.status().message();
  EXPECT_NE(values.status().message().find("quantization_config"), std::string::npos);
}

// An I32 tensor (a GPTQ / AWQ checkpoint's packed words) opens, raw bytes as stored, but readF32
// refuses it, naming the tensor and the quantization_config it needs, even with no elements
// (docs/reliability.md, finding 15: safetensors_fuzz had taken every readF32 of an opened
// checkpoint to succeed).
TEST_F(SafetensorsTest, I32TensorsOpenButAreNotWeights) {
  writeModel(
      {{"model.layers.0.q.qweight", {{"dtype", "I32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
       {"empty", {{"dtype", "I32"}, {"shape", {0, 5}}, {"data_offsets", {8, 8}}}}},
      std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8));
  auto checkpoint = SafetensorsCheckpoint::open(dir_);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  auto bytes = checkpoint->rawBytes("model.layers.0.q.qweight");
  ASSERT_TRUE(bytes.isOk());
  EXPECT_EQ(std::string(bytes->begin(), bytes->end()),
            std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8));
  for (const char *name : {"model.layers.0.q.qweight", "empty"}) {
    auto values = checkpoint->readF32(name);
    ASSERT_FALSE(values.isOk()) << name;
    EXPECT_NE(values.status().message().find(std::string("'") + name + "' holds I32 values"),
              std::string::npos)
        << values.status().message();
    EXPECT_NE(values.status().message().find("quantization_config"), std::string::npos);
  }
}

} // namespace
} // namespace kiln::compiler
