// Fuzz-style tests of the GGUF reader, built with AddressSanitizer and UBSan and run with a 64 MiB
// allocation limit (tests/compiler/import/CMakeLists.txt): truncations, random byte flips and
// hostile headers must give errors, never a read outside the buffer, undefined behaviour or an
// allocation sized from the file. Every parse gets its own heap buffer of exactly the bytes under
// test, so that ASan sees a read one byte past the end.
#include "compiler/import/gguf_dequant.h"
#include "compiler/import/gguf_file.h"
#include "runtime/base/file.h"
#include "tests/compiler/import/gguf_test_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <random>

namespace kiln::compiler {
namespace {

using testing::GgufBuilder;
using testing::ggufString;
using testing::podBytes;

// Written by tools/goldens/make_gguf_dequant_goldens.py: metadata of every value type, arrays,
// and nine tensors (F32, F16, BF16, Q8_0, Q4_0, Q5_1, Q4_K, Q6_K, I8).
const std::string kTiny = std::string(KILN_TEST_DATA_DIR) + "/gguf/tiny.gguf";
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

std::vector<uint8_t> loadTiny() {
  auto text = readFile(kTiny);
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  return text.isOk() ? std::vector<uint8_t>(text->begin(), text->end()) : std::vector<uint8_t>();
}

// Parses a private copy of `bytes` (exactly its size, on the heap) and, when it parses, checks
// that every tensor lies inside the copy and dequantizes each one kiln reads.
Result<GgufFile> parseAndTouch(const std::vector<uint8_t> &bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[std::max<size_t>(bytes.size(), 1)]);
  std::copy(bytes.begin(), bytes.end(), copy.get());
  const std::span<const uint8_t> buffer(copy.get(), bytes.size());
  auto file = GgufFile::parse(buffer, "fuzz.gguf");
  if (!file.isOk())
    return file;
  for (const GgufTensor &tensor : file->tensors()) {
    EXPECT_EQ(tensor.fileIndex, 0);
    EXPECT_LE(tensor.offset, buffer.size()) << tensor.name;
    EXPECT_LE(tensor.size, buffer.size() - std::min<uint64_t>(tensor.offset, buffer.size()))
        << tensor.name;
    const std::span<const uint8_t> data = file->tensorBytes(tensor);
    EXPECT_GE(data.data(), buffer.data());
    EXPECT_LE(data.data() + data.size(), buffer.data() + buffer.size());
    const GgmlTypeTraits *traits = ggmlTypeTraits(tensor.type);
    if (traits == nullptr || !traits->dequantizable)
      continue;
    std::vector<float> out(static_cast<size_t>(tensor.numElements()));
    Status status = dequantizeGgml(tensor.type, data, tensor.numElements(), out.data());
    EXPECT_TRUE(status.isOk()) << tensor.name << ": " << status.toString();
  }
  size_t total = 0;
  for (const auto &[key, value] : file->metadata())
    total += key.size() + value.stringValue.size() + value.arraySize();
  EXPECT_GT(total, 0u);
  return file;
}

uint64_t dataEnd(const GgufFile &file) {
  uint64_t end = 0;
  for (const GgufTensor &tensor : file.tensors())
    end = std::max(end, tensor.offset + tensor.size);
  return end;
}

TEST(GgufFuzzTest, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = loadTiny();
  auto whole = parseAndTouch(bytes);
  ASSERT_TRUE(whole.isOk()) << whole.status().toString();
  ASSERT_EQ(whole->tensors().size(), 9u);
  // GGUFWriter pads after the last tensor too; that padding is not needed, so cuts inside it
  // still parse. Every shorter file must not.
  const uint64_t end = dataEnd(*whole);
  ASSERT_LE(end, bytes.size());
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(size));
    auto file = parseAndTouch(cut);
    if (size < end)
      EXPECT_FALSE(file.isOk()) << "a file cut to " << size << " bytes parsed";
    else
      EXPECT_TRUE(file.isOk()) << size << ": " << file.status().toString();
    if (!file.isOk())
      EXPECT_EQ(file.status().message().rfind("fuzz.gguf: offset ", 0), 0u)
          << file.status().message();
  }
}

TEST(GgufFuzzTest, RandomByteFlipsNeverCrash) {
  const std::vector<uint8_t> bytes = loadTiny();
  auto whole = GgufFile::parse(bytes, "fuzz.gguf");
  ASSERT_TRUE(whole.isOk()) << whole.status().toString();
  // The header, metadata and tensor table: where flips change what is parsed.
  const uint64_t headerEnd = whole->tensors().front().offset;
  std::mt19937_64 random(17); // fixed seed: the same 5000 mutations on every run
  int parsed = 0;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    std::vector<uint8_t> mutated = bytes;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      const uint64_t span = random() % 4 != 0 ? headerEnd : mutated.size();
      const size_t at = static_cast<size_t>(random() % span);
      switch (random() % 4) {
      case 0:
        mutated[at] ^= static_cast<uint8_t>(1u << (random() % 8));
        break;
      case 1:
        mutated[at] = 0xff;
        break;
      case 2:
        mutated[at] = 0;
        break;
      default:
        mutated[at] = static_cast<uint8_t>(random());
        break;
      }
    }
    if (random() % 8 == 0) // sometimes also cut the end off
      mutated.resize(static_cast<size_t>(random() % mutated.size()));
    auto file = parseAndTouch(mutated);
    parsed += file.isOk() ? 1 : 0;
    if (!file.isOk())
      EXPECT_EQ(file.status().message().rfind("fuzz.gguf: offset ", 0), 0u)
          << file.status().message();
  }
  // Most flips land in strings and values that any bytes are valid for.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 5000);
  std::cout << parsed << " of 5000 mutated files parsed; the rest gave errors\n";
}

void expectError(const std::string &bytes, const std::string &named) {
  const std::vector<uint8_t> data(bytes.begin(), bytes.end());
  auto file = parseAndTouch(data);
  ASSERT_FALSE(file.isOk()) << named;
  EXPECT_NE(file.status().message().find(named), std::string::npos)
      << "'" << named << "' not in: " << file.status().message();
}

TEST(GgufFuzzTest, HostileCountsAreRefusedBeforeAllocating) {
  GgufBuilder tensors;
  tensors.tensorCountOverride = static_cast<int64_t>(kU64Max >> 1);
  expectError(tensors.build(), "tensor count");
  GgufBuilder kvs;
  kvs.kvCountOverride = static_cast<int64_t>(kU64Max >> 1);
  expectError(kvs.build(), "metadata count");

  // The largest lengths and counts in every position that holds one.
  const std::string huge = podBytes<uint64_t>(kU64Max);
  std::string header = std::string("GGUF") + podBytes<uint32_t>(3);
  expectError(header + podBytes<uint64_t>(0) + podBytes<uint64_t>(1) + huge + std::string(64, 'x'),
              "metadata key length 18446744073709551615");
  const std::string kvHeader =
      header + podBytes<uint64_t>(0) + podBytes<uint64_t>(1) + ggufString("k");
  expectError(kvHeader + podBytes<uint32_t>(8) + huge + std::string(64, 'x'),
              "string length 18446744073709551615");
  for (uint32_t element = 0; element <= 12; ++element) {
    if (element == 9)
      continue;
    expectError(kvHeader + podBytes<uint32_t>(9) + podBytes<uint32_t>(element) + huge +
                    std::string(64, 'x'),
                "array count 18446744073709551615");
  }
  // A string array whose count fits the bytes but whose first element's length does not.
  expectError(kvHeader + podBytes<uint32_t>(9) + podBytes<uint32_t>(8) + podBytes<uint64_t>(2) +
                  huge + podBytes<uint64_t>(0),
              "element length 18446744073709551615");

  GgufBuilder dims;
  dims.tensorInfo("w", {kU64Max}, 0, 0).trailing(std::string(64, 'x'));
  expectError(dims.build(), "dimension 0 is 18446744073709551615");
  GgufBuilder nDims;
  nDims.tensorInfo("w", {1}, 0, 0);
  std::string nDimsBytes = nDims.build();
  std::memcpy(&nDimsBytes[24 + 9], "\xff\xff\xff\xff", 4);
  expectError(nDimsBytes, "4294967295 dimensions");
  GgufBuilder tensorName;
  tensorName.tensorInfo("w", {1}, 0, 0);
  std::string nameBytes = tensorName.build();
  std::memcpy(&nameBytes[24], huge.data(), 8);
  expectError(nameBytes, "tensor name length 18446744073709551615");
  GgufBuilder bigAlignment;
  bigAlignment.kvRaw("general.alignment", 10, podBytes<uint64_t>(uint64_t{1} << 62));
  bigAlignment.tensorInfo("w", {1}, 0, 0);
  expectError(bigAlignment.build(), "runs past the end");
}

TEST(GgufFuzzTest, CountsAtTheLimitStillEndInAnError) {
  // Counts that the bytes left allow, read item by item until something is wrong.
  const std::string header = std::string("GGUF") + podBytes<uint32_t>(3);
  // 100 key/values of the smallest size (13 bytes: empty key, uint8): the second repeats the key.
  expectError(header + podBytes<uint64_t>(0) + podBytes<uint64_t>(100) + std::string(1300, '\0'),
              "duplicate metadata key ''");
  // 100 strings in 800 bytes, but the first one takes 790 of them.
  const std::string kv = ggufString("a") + podBytes<uint32_t>(9) + podBytes<uint32_t>(8);
  expectError(header + podBytes<uint64_t>(0) + podBytes<uint64_t>(1) + kv +
                  podBytes<uint64_t>(100) + podBytes<uint64_t>(790) + std::string(792, 'x'),
              "file ends inside metadata key 'a' element length");
}

} // namespace
} // namespace kiln::compiler
