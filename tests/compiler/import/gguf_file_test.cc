#include "compiler/import/gguf_file.h"

#include "compiler/import/gguf_dequant.h"
#include "tests/compiler/import/gguf_test_builder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;
using testing::ggufString;
using testing::podBytes;

// Written by tools/goldens/make_gguf_dequant_goldens.py with gguf-py's GGUFWriter.
const std::string kGgufData = std::string(KILN_TEST_DATA_DIR) + "/gguf";
const std::string kTiny = kGgufData + "/tiny.gguf";

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8;

std::string f32Bytes(std::initializer_list<float> values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

Result<GgufFile> parseBytes(const std::vector<uint8_t> &bytes) {
  return GgufFile::parse(bytes, "model.gguf");
}

// Parsing must fail with a message naming the source, the byte offset and each of `named`.
void expectParseError(const GgufBuilder &builder, uint64_t offset,
                      std::initializer_list<std::string> named) {
  const std::vector<uint8_t> bytes = builder.bytes();
  auto file = parseBytes(bytes);
  ASSERT_FALSE(file.isOk());
  const std::string &message = file.status().message();
  const std::string prefix = "model.gguf: offset " + std::to_string(offset) + ": ";
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << "expected '" << prefix << "' in: " << message;
  for (const std::string &text : named)
    EXPECT_NE(message.find(text), std::string::npos) << "'" << text << "' not in: " << message;
}

GgufBuilder oneTensorModel() {
  GgufBuilder builder;
  builder.kvString("general.architecture", "llama");
  builder.tensor("w", {2, 2}, kF32, f32Bytes({1, 2, 3, 4}));
  return builder;
}

TEST(GgufFileTest, ReadsEveryScalarTypeWrittenByGgufPy) {
  auto file = GgufFile::open(kTiny);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->path(), kTiny);
  EXPECT_EQ(*file->getString("general.architecture"), "llama");
  EXPECT_EQ(*file->getString("general.name"), "kiln tiny");
  EXPECT_EQ(*file->getInt("llama.context_length"), 64);
  struct Case {
    const char *key;
    GgufValueType type;
    int64_t value;
  };
  for (const Case &c : {Case{"test.uint8", GgufValueType::kUint8, 200},
                        Case{"test.int8", GgufValueType::kInt8, -100},
                        Case{"test.uint16", GgufValueType::kUint16, 60000},
                        Case{"test.int16", GgufValueType::kInt16, -30000},
                        Case{"test.uint32", GgufValueType::kUint32, 4000000000},
                        Case{"test.int32", GgufValueType::kInt32, -2000000000},
                        Case{"test.uint64", GgufValueType::kUint64, int64_t{1} << 62},
                        Case{"test.int64", GgufValueType::kInt64, -(int64_t{1} << 62)},
                        Case{"test.bool", GgufValueType::kBool, 1}}) {
    const GgufValue *value = file->find(c.key);
    ASSERT_NE(value, nullptr) << c.key;
    EXPECT_EQ(value->type, c.type) << c.key;
    EXPECT_TRUE(value->isInteger()) << c.key;
    EXPECT_EQ(value->intValue, c.value) << c.key;
    EXPECT_EQ(value->arraySize(), 0u);
  }
  EXPECT_EQ(file->find("test.float32")->type, GgufValueType::kFloat32);
  EXPECT_EQ(*file->getFloat("test.float32"), 1.25);
  EXPECT_EQ(*file->getFloat("test.float64"), 0.1);
  EXPECT_EQ(*file->getFloat("test.uint8"), 200.0);
  EXPECT_TRUE(*file->getBool("test.bool"));
  EXPECT_EQ(*file->getString("test.string"), "h\xc3\xa9llo");
}

TEST(GgufFileTest, ReadsArraysWrittenByGgufPy) {
  auto file = GgufFile::open(kTiny);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  const GgufValue *ints = file->find("test.array.int32");
  ASSERT_NE(ints, nullptr);
  EXPECT_TRUE(ints->isArray());
  EXPECT_EQ(ints->elementType, GgufValueType::kInt32);
  EXPECT_EQ(ints->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(ints->arraySize(), 3u);
  EXPECT_EQ(file->find("test.array.uint8")->ints, (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(file->find("test.array.bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(file->find("test.array.float32")->floats, (std::vector<double>{0.5, -1.5}));
  const GgufValue *strings = file->find("test.array.string");
  EXPECT_EQ(strings->elementType, GgufValueType::kString);
  EXPECT_EQ(strings->strings, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(strings->arraySize(), 3u);
}

TEST(GgufFileTest, TypedGettersNameTheKeyAndType) {
  auto file = GgufFile::open(kTiny);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  auto notInt = file->getInt("test.string");
  ASSERT_FALSE(notInt.isOk());
  EXPECT_NE(notInt.status().message().find("'test.string' is string, expected an integer"),
            std::string::npos)
      << notInt.status().message();
  auto missing = file->getString("no.such.key");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'no.such.key'"), std::string::npos);
  EXPECT_FALSE(file->getBool("test.uint8").isOk());
  auto array = file->getFloat("test.array.float32");
  ASSERT_FALSE(array.isOk());
  EXPECT_NE(array.status().message().find("array of float32"), std::string::npos);
  EXPECT_EQ(file->getIntOr("no.such.key", 7), 7);
  EXPECT_EQ(file->getIntOr("test.int8", 7), -100);
  EXPECT_EQ(file->getFloatOr("test.string", 2.5), 2.5);
  EXPECT_EQ(file->getStringOr("test.uint8", "x"), "x");
  EXPECT_TRUE(file->getBoolOr("test.bool", false));
  EXPECT_EQ(std::string(ggufValueTypeName(GgufValueType::kFloat64)), "float64");
}

TEST(GgufFileTest, ReadsTheTensorTable) {
  auto file = GgufFile::open(kTiny);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  std::vector<std::string> names;
  for (const GgufTensor &tensor : file->tensors()) {
    names.push_back(tensor.name);
    EXPECT_EQ(tensor.offset % 32, 0u) << tensor.name;
    EXPECT_EQ(tensor.fileIndex, 0);
    EXPECT_EQ(file->tensorBytes(tensor).size(), tensor.size);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"f32", "f16", "bf16", "q8_0", "q4_0", "q5_1", "q4_k",
                                             "q6_k", "i8"}));
  const GgufTensor *f32 = file->tensor("f32");
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->type, kF32);
  EXPECT_EQ(f32->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(f32->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f32->numElements(), 6);
  EXPECT_EQ(f32->size, 24u);
  std::vector<float> values(6);
  std::memcpy(values.data(), file->tensorBytes(*f32).data(), 24);
  EXPECT_EQ(values, (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}));

  const GgufTensor *f16 = file->tensor("f16");
  std::vector<float> halves(4);
  ASSERT_TRUE(dequantizeGgml(f16->type, file->tensorBytes(*f16), 4, halves.data()).isOk());
  EXPECT_EQ(halves, (std::vector<float>{1, -2, 0.5, 65504}));

  EXPECT_EQ(file->tensor("q8_0")->shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(file->tensor("q8_0")->size, 68u);
  EXPECT_EQ(file->tensor("q4_k")->type, 12u);
  EXPECT_EQ(file->tensor("q4_k")->size, 144u);
  EXPECT_EQ(file->tensor("q6_k")->size, 210u);
  EXPECT_EQ(file->tensor("i8")->type, 24u); // kept; dequantizeGgml reports it when read
  EXPECT_EQ(file->tensor("i8")->size, 5u);
  EXPECT_EQ(file->tensor("missing"), nullptr);
}

TEST(GgufFileTest, HonoursGeneralAlignment) {
  GgufBuilder builder;
  builder.alignment = 64;
  builder.kvU32("general.alignment", 64);
  builder.tensor("a", {3}, kF32, f32Bytes({1, 2, 3}));
  builder.tensor("b", {2}, kF32, f32Bytes({4, 5}));
  const std::vector<uint8_t> bytes = builder.bytes();
  auto file = parseBytes(bytes);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->tensor("a")->offset % 64, 0u);
  EXPECT_EQ(file->tensor("b")->offset - file->tensor("a")->offset, 64u);
  float b0;
  std::memcpy(&b0, file->tensorBytes(*file->tensor("b")).data(), 4);
  EXPECT_EQ(b0, 4.0f);
}

TEST(GgufFileTest, ReadsVersion2AndFilesWithoutTensors) {
  GgufBuilder builder = oneTensorModel();
  builder.version = 2;
  auto v2 = parseBytes(builder.bytes());
  ASSERT_TRUE(v2.isOk()) << v2.status().toString();
  EXPECT_EQ(v2->version(), 2u);
  GgufBuilder empty;
  empty.kvString("general.architecture", "llama");
  auto noTensors = parseBytes(empty.bytes());
  ASSERT_TRUE(noTensors.isOk()) << noTensors.status().toString();
  EXPECT_TRUE(noTensors->tensors().empty());
}

TEST(GgufFileTest, HeaderErrors) {
  GgufBuilder magic = oneTensorModel();
  magic.magic = "GGML";
  expectParseError(magic, 0, {"not a GGUF file"});
  GgufBuilder v1 = oneTensorModel();
  v1.version = 1;
  expectParseError(v1, 4, {"GGUF version 1", "versions 2 and 3"});
  GgufBuilder bigEndian = oneTensorModel();
  bigEndian.version = 0x03000000;
  expectParseError(bigEndian, 4, {"big-endian"});
  GgufBuilder kvs = oneTensorModel();
  kvs.kvCountOverride = int64_t{1} << 60;
  expectParseError(kvs, 16, {"metadata count 1152921504606846976", "bytes left"});
  GgufBuilder tensors = oneTensorModel();
  tensors.tensorCountOverride = 1000;
  expectParseError(tensors, 8, {"tensor count 1000"});
  auto empty = parseBytes({});
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("offset 0: file ends inside the magic"),
            std::string::npos)
      << empty.status().message();
}

TEST(GgufFileTest, MetadataErrors) {
  constexpr uint64_t kFirstKv = 24; // after magic, version and the two counts
  GgufBuilder unknownType;
  unknownType.kvRaw("x.y", 13, podBytes<uint32_t>(0));
  expectParseError(unknownType, kFirstKv + 8 + 3, {"'x.y'", "unknown value type 13"});

  GgufBuilder longKey;
  longKey.kvRaw("", 4, "").trailing(podBytes<uint64_t>(0));
  std::string bytes = longKey.build();
  std::memcpy(&bytes[kFirstKv], "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  auto hostile = GgufFile::parse({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()},
                                 "model.gguf");
  ASSERT_FALSE(hostile.isOk());
  EXPECT_EQ(hostile.status().message(),
            "model.gguf: offset 24: metadata key length 18446744073709551615 exceeds the " +
                std::to_string(bytes.size() - kFirstKv - 8) + " bytes left");

  GgufBuilder longString;
  longString.kvRaw("s", 8, podBytes<uint64_t>(1000) + "abc");
  expectParseError(longString, kFirstKv + 9 + 4, {"'s' string length 1000 exceeds the 3 bytes"});

  GgufBuilder nested;
  nested.kvRaw("a", 9, podBytes<uint32_t>(9) + podBytes<uint64_t>(1));
  expectParseError(nested, kFirstKv + 9 + 4, {"'a' is an array of arrays"});

  GgufBuilder arrayType;
  arrayType.kvRaw("a", 9, podBytes<uint32_t>(77) + podBytes<uint64_t>(1));
  expectParseError(arrayType, kFirstKv + 9 + 4, {"'a' element has unknown value type 77"});

  GgufBuilder hugeArray;
  hugeArray.kvRaw("a", 9, podBytes<uint32_t>(6) + podBytes<uint64_t>(uint64_t{1} << 61));
  expectParseError(hugeArray, kFirstKv + 9 + 8, {"'a' array count 2305843009213693952"});

  GgufBuilder bigU64;
  bigU64.kvRaw("u", 10, podBytes<uint64_t>(uint64_t{1} << 63));
  expectParseError(bigU64, kFirstKv + 9 + 4, {"'u'", "9223372036854775808", "INT64_MAX"});

  GgufBuilder badBool;
  badBool.kvRaw("b", 7, std::string(1, '\x02'));
  expectParseError(badBool, kFirstKv + 9 + 4, {"'b'", "bool value 2"});

  GgufBuilder duplicate;
  duplicate.kvU32("k", 1).kvU32("k", 2);
  expectParseError(duplicate, kFirstKv + 9 + 4 + 4, {"duplicate metadata key 'k'"});

  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufBuilder badAlignment = oneTensorModel();
    badAlignment.kvU32("general.alignment", alignment);
    const uint64_t valueAt = badAlignment.build().find("general.alignment") + 17 + 4;
    expectParseError(badAlignment, valueAt, {"general.alignment", "power of two"});
  }
}

TEST(GgufFileTest, TensorInfoErrors) {
  // Without key/values the first tensor info starts at byte 24.
  GgufBuilder fiveDims;
  fiveDims.tensor("w", {1, 1, 1, 1, 1}, kF32, f32Bytes({1}));
  expectParseError(fiveDims, 24 + 9, {"tensor 'w' has 5 dimensions", "1 to 4"});
  GgufBuilder noDims;
  noDims.tensor("w", {}, kF32, f32Bytes({1}));
  expectParseError(noDims, 24 + 9, {"0 dimensions"});
  GgufBuilder zeroDim;
  zeroDim.tensor("w", {4, 0}, kF32, "");
  expectParseError(zeroDim, 24 + 9 + 4 + 8, {"dimension 1 is 0"});
  GgufBuilder overflow;
  overflow.tensorInfo("w", {uint64_t{1} << 40, uint64_t{1} << 40}, kF32, 0);
  expectParseError(overflow, 24 + 9 + 4 + 8, {"overflows int64"});

  GgufBuilder duplicate;
  duplicate.tensor("w", {1}, kF32, f32Bytes({1})).tensor("w", {1}, kF32, f32Bytes({2}));
  expectParseError(duplicate, 24 + 33, {"duplicate tensor 'w'"});

  GgufBuilder unknownType;
  unknownType.tensor("w", {32}, 42, std::string(32, '\0'));
  expectParseError(unknownType, 24, {"tensor 'w' has ggml type 42", "does not define"});
  GgufBuilder retiredType;
  retiredType.tensor("w", {32}, 4, std::string(32, '\0'));
  expectParseError(retiredType, 24, {"ggml type 4"});
  GgufBuilder partialBlock;
  partialBlock.tensor("w", {48, 2}, kQ4_0, std::string(54, '\0'));
  expectParseError(partialBlock, 24, {"Q4_0", "rows of 48", "block size 32"});

  GgufBuilder misaligned;
  misaligned.tensorInfo("w", {1}, kF32, 4).trailing(std::string(64, '\0'));
  expectParseError(misaligned, 24, {"offset 4 is not a multiple of the alignment 32"});
  GgufBuilder pastEnd;
  pastEnd.tensor("w", {8}, kF32, f32Bytes({1, 2, 3})); // 12 of 32 bytes
  expectParseError(pastEnd, 24, {"tensor 'w' data (32 bytes", "runs past the end"});
  GgufBuilder farOffset;
  farOffset.tensorInfo("w", {1}, kF32, uint64_t{1} << 63);
  expectParseError(farOffset, 24, {"runs past the end"});
  GgufBuilder hugeName;
  hugeName.tensorInfo("w", {1}, kF32, 0);
  std::string bytes = hugeName.build();
  std::memcpy(&bytes[24], "\x00\x00\x00\x00\x00\x00\x00\x40", 8);
  auto hostile = GgufFile::parse({reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()},
                                 "model.gguf");
  ASSERT_FALSE(hostile.isOk());
  EXPECT_NE(hostile.status().message().find("offset 24: tensor name length 4611686018427387904"),
            std::string::npos)
      << hostile.status().message();
}

TEST(GgufFileTest, TruncationNamesWhereTheFileEnds) {
  GgufBuilder builder;
  builder.kvString("general.architecture", "llama");
  const std::string cut = builder.build().substr(0, 40); // inside the key's 20 bytes
  auto file =
      GgufFile::parse({reinterpret_cast<const uint8_t *>(cut.data()), cut.size()}, "model.gguf");
  ASSERT_FALSE(file.isOk());
  EXPECT_NE(file.status().message().find(
                "model.gguf: offset 24: metadata key length 20 exceeds the 8 bytes left"),
            std::string::npos)
      << file.status().message();
}

class GgufOpenTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        (fs::temp_directory_path() / ("kiln_gguf_" + std::to_string(getpid()) + "_" + info->name()))
            .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string &name, const std::string &bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
    return dir_ + "/" + name;
  }
  void copySplitFixture() {
    for (int i = 1; i <= 3; ++i) {
      const std::string name = "tiny-split-0000" + std::to_string(i) + "-of-00003.gguf";
      fs::copy_file(kGgufData + "/split/" + name, dir_ + "/" + name);
    }
  }
  std::string part(int i) const {
    return dir_ + "/tiny-split-0000" + std::to_string(i) + "-of-00003.gguf";
  }
  void expectOpenError(const std::string &path, std::initializer_list<std::string> named) {
    auto file = GgufFile::open(path);
    ASSERT_FALSE(file.isOk());
    for (const std::string &text : named)
      EXPECT_NE(file.status().message().find(text), std::string::npos)
          << "'" << text << "' not in: " << file.status().message();
  }

  std::string dir_;
};

void expectSplitModel(const Result<GgufFile> &file) {
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(*file->getString("general.name"), "kiln tiny split");
  EXPECT_EQ(file->getIntOr("split.no", -1), 0); // the first part's metadata
  ASSERT_EQ(file->tensors().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const GgufTensor *tensor = file->tensor("t" + std::to_string(i));
    ASSERT_NE(tensor, nullptr);
    EXPECT_EQ(tensor->fileIndex, i);
    EXPECT_EQ(tensor->shape(), (std::vector<int64_t>{2, 4}));
    float first;
    std::memcpy(&first, file->tensorBytes(*tensor).data(), 4);
    EXPECT_EQ(first, static_cast<float>(i + 1));
  }
}

TEST_F(GgufOpenTest, OpensASplitModelFromAnyPartOrItsDirectory) {
  copySplitFixture();
  expectSplitModel(GgufFile::open(part(1)));
  expectSplitModel(GgufFile::open(part(3)));
  auto byDir = GgufFile::open(dir_);
  expectSplitModel(byDir);
  EXPECT_EQ(byDir->path(), dir_);
  expectSplitModel(GgufFile::open(kGgufData + "/split"));
}

TEST_F(GgufOpenTest, SplitErrors) {
  copySplitFixture();
  fs::remove(part(2));
  expectOpenError(part(1), {part(2), "part 2 of the 3-part split model is missing"});

  // Part 2 claiming to be part 1 of 3, and one claiming a different count.
  GgufBuilder wrongNo;
  wrongNo.kvU16("split.no", 0).kvU16("split.count", 3);
  write("tiny-split-00002-of-00003.gguf", wrongNo.build());
  expectOpenError(part(1), {part(2), "part 0 (0-based) of 3", "file name says part 1 of 3"});
  GgufBuilder wrongCount;
  wrongCount.kvU16("split.no", 1).kvU16("split.count", 4);
  write("tiny-split-00002-of-00003.gguf", wrongCount.build());
  expectOpenError(part(1), {"of 4"});

  // The same tensor in two parts.
  GgufBuilder repeated;
  repeated.kvU16("split.no", 1).tensor("t0", {4, 2}, kF32, std::string(32, '\0'));
  write("tiny-split-00002-of-00003.gguf", repeated.build());
  expectOpenError(part(1), {part(2), "tensor 't0' is also in an earlier part"});
}

TEST_F(GgufOpenTest, SplitMetadataWithoutASplitName) {
  GgufBuilder part;
  part.kvU16("split.count", 3);
  expectOpenError(write("model.gguf", part.build()), {"split model of 3 parts"});
}

TEST_F(GgufOpenTest, DirectoryMustHoldOneModel) {
  expectOpenError(dir_, {dir_, "no .gguf file"});
  const std::string model = oneTensorModel().build();
  write("a.gguf", model);
  auto one = GgufFile::open(dir_);
  ASSERT_TRUE(one.isOk()) << one.status().toString();
  EXPECT_EQ(one->tensors().size(), 1u);
  write("b.gguf", model);
  expectOpenError(dir_, {"more than one model", "a.gguf, b.gguf"});
  expectOpenError(dir_ + "/missing.gguf", {"missing.gguf", "no such file"});
}

TEST_F(GgufOpenTest, ErrorsFromOpenNameTheFile) {
  const std::string path = write("bad.gguf", "GGUF");
  expectOpenError(path, {path + ": offset 4: file ends inside the version"});
}

TEST_F(GgufOpenTest, IsGgufPath) {
  EXPECT_TRUE(isGgufPath(kTiny));
  EXPECT_TRUE(isGgufPath("/nowhere/model.gguf"));
  EXPECT_FALSE(isGgufPath("/nowhere/model.safetensors"));
  EXPECT_FALSE(isGgufPath(dir_)); // empty directory
  write("model.gguf", oneTensorModel().build());
  EXPECT_TRUE(isGgufPath(dir_));
  write("config.json", "{}");
  EXPECT_FALSE(isGgufPath(dir_)); // a Hugging Face checkpoint directory
}

} // namespace
} // namespace kiln::compiler
