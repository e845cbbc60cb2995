#include "compiler/import/gguf_dequant.h"
#include "compiler/import/gguf_packed.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <set>
#include <vector>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

// tests/data/gguf/dequant_golden.json, from tools/goldens/make_gguf_dequant_goldens.py (gguf-py's
// numpy reference for ggml's block formats).
const std::string kGoldenPath = std::string(KILN_TEST_DATA_DIR) + "/gguf/dequant_golden.json";

std::vector<uint8_t> decodeBase64(const std::string &text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0)
      continue; // '=' padding
    buffer = buffer << 6 | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(buffer >> bits));
    }
  }
  return out;
}

Json loadGolden() {
  auto text = readFile(kGoldenPath);
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  return text.isOk() ? Json::parse(*text) : Json::object();
}

TEST(GgufDequantTest, MatchesGgufPyBitForBit) {
  const Json golden = loadGolden();
  ASSERT_FALSE(golden["cases"].empty());
  std::set<uint32_t> covered;
  for (const Json &entry : golden["cases"]) {
    const uint32_t type = entry["type"].get<uint32_t>();
    const int64_t count = entry["count"].get<int64_t>();
    const std::string label =
        entry["name"].get<std::string>() + " " + entry["case"].get<std::string>();
    const std::vector<uint8_t> bytes = decodeBase64(entry["bytes"].get<std::string>());
    const std::vector<uint8_t> expectedBytes = decodeBase64(entry["expected"].get<std::string>());
    ASSERT_EQ(expectedBytes.size(), static_cast<size_t>(count) * 4) << label;
    std::vector<float> expected(static_cast<size_t>(count));
    std::memcpy(expected.data(), expectedBytes.data(), expectedBytes.size());

    std::vector<float> out(static_cast<size_t>(count), -12345.0f);
    Status status = dequantizeGgml(type, bytes, count, out.data());
    ASSERT_TRUE(status.isOk()) << label << ": " << status.toString();
    // Exact: kiln does ggml's fp32 operations in ggml's order (and gguf-py, in numpy, the same
    // ones), with no fused multiply-add, so every value has the same bits.
    int mismatches = 0;
    for (int64_t i = 0; i < count && mismatches < 5; ++i) {
      if (std::memcmp(&out[i], &expected[i], 4) != 0) {
        ++mismatches;
        ADD_FAILURE() << label << " element " << i << ": kiln " << out[i] << ", gguf-py "
                      << expected[i];
      }
    }
    covered.insert(type);
  }
  for (uint32_t type = 0; type < 64; ++type) {
    const GgmlTypeTraits *traits = ggmlTypeTraits(type);
    if (traits && traits->dequantizable)
      EXPECT_TRUE(covered.count(type)) << traits->name << " has no golden case";
  }
}

TEST(GgufDequantTest, TypeTableMatchesGgufPy) {
  const Json golden = loadGolden();
  std::set<uint32_t> listed;
  for (const Json &row : golden["types"]) {
    const uint32_t type = row[0].get<uint32_t>();
    listed.insert(type);
    const GgmlTypeTraits *traits = ggmlTypeTraits(type);
    ASSERT_NE(traits, nullptr) << "ggml type " << type << " (" << row[1] << ")";
    EXPECT_EQ(traits->name, row[1].get<std::string>());
    EXPECT_EQ(traits->blockSize, row[2].get<int64_t>()) << traits->name;
    // gguf-py still has Q8_1's old float d/s layout (40 bytes); ggml's block_q8_1 has been two
    // fp16 (36 bytes) since 2023. Q8_1 is an activation format that files do not hold.
    const int64_t typeSize = type == 9 ? 36 : row[3].get<int64_t>();
    EXPECT_EQ(traits->typeSize, typeSize) << traits->name;
  }
  for (uint32_t type = 0; type < 256; ++type)
    if (!listed.count(type))
      EXPECT_EQ(ggmlTypeTraits(type), nullptr) << type;
  EXPECT_EQ(ggmlTypeTraits(0xffffffffu), nullptr);
}

TEST(GgufDequantTest, TypeNames) {
  EXPECT_EQ(ggmlTypeName(12), "Q4_K");
  EXPECT_EQ(ggmlTypeName(30), "BF16");
  EXPECT_EQ(ggmlTypeName(4), "ggml type 4"); // retired Q4_2
  EXPECT_EQ(ggmlTypeName(42), "ggml type 42");
}

void expectError(const Status &status, std::initializer_list<std::string> named) {
  ASSERT_FALSE(status.isOk());
  for (const std::string &text : named)
    EXPECT_NE(status.message().find(text), std::string::npos)
        << "'" << text << "' not in: " << status.message();
}

TEST(GgufDequantTest, WrongByteSizeIsAnError) {
  std::vector<uint8_t> bytes(35);
  std::vector<float> out(64);
  expectError(dequantizeGgml(2, bytes, 64, out.data()), {"Q4_0", "64 elements", "35 bytes"});
  expectError(dequantizeGgml(0, bytes, 8, out.data()), {"F32", "35 bytes"});
}

TEST(GgufDequantTest, CountNotWholeBlocksIsAnError) {
  std::vector<uint8_t> bytes(144);
  std::vector<float> out(256);
  expectError(dequantizeGgml(12, bytes, 100, out.data()), {"100", "Q4_K", "256"});
  expectError(dequantizeGgml(12, bytes, -256, out.data()), {"-256"});
}

TEST(GgufDequantTest, UnknownAndUnreadTypesAreErrors) {
  std::vector<uint8_t> bytes(256);
  std::vector<float> out(256);
  const Status unknown = dequantizeGgml(42, bytes, 256, out.data());
  expectError(unknown, {"ggml type 42", "Q4_K"});
  EXPECT_EQ(unknown.code(), StatusCode::kUnimplemented);
  expectError(dequantizeGgml(16, bytes, 256, out.data()), {"IQ2_XXS", "(16)"});
  expectError(dequantizeGgml(24, bytes, 256, out.data()), {"I8"});
}

TEST(GgufDequantTest, EmptyTensorIsFine) {
  EXPECT_TRUE(dequantizeGgml(14, {}, 0, nullptr).isOk());
}

// The blocks kiln keeps packed (Q8_0, Q4_0, Q4_1 -> Q8, Q4, Q4M: compiler/import/gguf_packed.h),
// read as a [count / 64, 64] matrix with rows in reverse order: each weight, dequantized by the
// artifact format's definition, has gguf-py's bits.
TEST(GgufDequantTest, PackedBlocksHoldGgufPysWeights) {
  const Json golden = loadGolden();
  std::set<uint32_t> covered;
  for (const Json &entry : golden["cases"]) {
    const uint32_t type = entry["type"].get<uint32_t>();
    const int64_t count = entry["count"].get<int64_t>(), cols = 64, rows = count / cols;
    const std::optional<TensorInfo::Packed> form = ggmlPackedForm(type, cols);
    if (!form)
      continue;
    const std::string label =
        entry["name"].get<std::string>() + " " + entry["case"].get<std::string>();
    EXPECT_EQ(form->groupSize, 32) << label;
    const std::vector<uint8_t> bytes = decodeBase64(entry["bytes"].get<std::string>());
    const std::vector<uint8_t> expectedBytes = decodeBase64(entry["expected"].get<std::string>());
    std::vector<float> expected(static_cast<size_t>(count));
    std::memcpy(expected.data(), expectedBytes.data(), expectedBytes.size());
    const QuantizedMatrix m =
        unpackGgmlBlocks(type, bytes, rows, cols, [rows](int64_t r) { return rows - 1 - r; });
    int mismatches = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols && mismatches < 5; ++c) {
        const float got = dequantizedWeight(m, r, c);
        const float want = expected[static_cast<size_t>((rows - 1 - r) * cols + c)];
        if (std::memcmp(&got, &want, 4) != 0) {
          ++mismatches;
          ADD_FAILURE() << label << " row " << r << " col " << c << ": " << got << " vs " << want;
        }
      }
    covered.insert(type);
  }
  EXPECT_EQ(covered, (std::set<uint32_t>{2, 3, 8})); // Q4_0, Q4_1, Q8_0
  EXPECT_FALSE(ggmlPackedForm(8, 48));               // columns not whole blocks
  EXPECT_FALSE(ggmlPackedForm(12, 256));             // Q4_K is dequantized instead
}

} // namespace
} // namespace kiln::compiler
