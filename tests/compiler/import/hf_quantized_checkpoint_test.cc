// HfQuantizedCheckpoint (compiler/import/hf_quantized_checkpoint.h) on hand-built one-linear
// checkpoints written here word by word from the GPTQ and AWQ layouts: the weights it reads and
// hands out packed, the names it hides, and errors naming the tensor for checkpoints that do not
// follow the layout. (tests/e2e/gptq_awq_models_test.cc runs whole fixtures against transformers.)
#include "compiler/import/hf_quantized_checkpoint.h"
#include "compiler/import/safetensors.h"

#include "runtime/base/half.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int64_t kOut = 16, kIn = 64, kGroup = 32, kGroups = kIn / kGroup;

// The stored integers and fp16 scales of the linear: q[k][o], zero[g][o], scale[g][o].
int q(int64_t k, int64_t o) {
  return int((k * 7 + o * 3) % 16);
}
// 1..15: the original GPTQ format stores zero - 1 in 4 bits, so it cannot hold a zero of 0.
int zeroOf(int64_t g, int64_t o, bool symmetric) {
  return symmetric ? 8 : 1 + int((g * 5 + o) % 15);
}
uint16_t scaleOf(int64_t g, int64_t o) {
  return f32ToF16(0.25f + 0.125f * float((g + o) % 5) * (o % 2 ? -1.0f : 1.0f));
}

struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

class HfQuantizedCheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("kiln_hfq_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::map<std::string, Tensor> &tensors) {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto &[name, t] : tensors) {
      header[name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
      data += t.bytes;
    }
    const std::string text = header.dump();
    const uint64_t length = text.size();
    std::ofstream(dir_ + "/model.safetensors", std::ios::binary)
        << std::string(reinterpret_cast<const char *>(&length), 8) << text << data;
  }

  Result<std::shared_ptr<const HfQuantizedCheckpoint>> open(const HfQuantization &q) {
    KILN_ASSIGN_OR_RETURN(SafetensorsCheckpoint stored, SafetensorsCheckpoint::open(dir_));
    return HfQuantizedCheckpoint::create(
        std::make_shared<const SafetensorsCheckpoint>(std::move(stored)), q);
  }

  std::string dir_;
};

std::string words(const std::vector<uint32_t> &w) {
  return std::string(reinterpret_cast<const char *>(w.data()), w.size() * 4);
}

std::string scalesBytes() {
  std::vector<uint16_t> s;
  for (int64_t g = 0; g < kGroups; ++g)
    for (int64_t o = 0; o < kOut; ++o)
      s.push_back(scaleOf(g, o));
  return std::string(reinterpret_cast<const char *>(s.data()), s.size() * 2);
}

// GPTQ: qweight [in/8, out] down the inputs, qzeros [groups, out/8] minus one, g_idx.
std::map<std::string, Tensor> gptqLinear(bool symmetric) {
  std::vector<uint32_t> qweight(kIn / 8 * kOut, 0), qzeros(kGroups * kOut / 8, 0);
  for (int64_t k = 0; k < kIn; ++k)
    for (int64_t o = 0; o < kOut; ++o)
      qweight[(k / 8) * kOut + o] |= uint32_t(q(k, o)) << (4 * (k % 8));
  for (int64_t g = 0; g < kGroups; ++g)
    for (int64_t o = 0; o < kOut; ++o)
      qzeros[g * (kOut / 8) + o / 8] |= uint32_t(zeroOf(g, o, symmetric) - 1) << (4 * (o % 8));
  std::vector<uint32_t> gIdx(kIn);
  for (int64_t k = 0; k < kIn; ++k)
    gIdx[k] = uint32_t(k / kGroup);
  return {{"l.qweight", {"I32", {kIn / 8, kOut}, words(qweight)}},
          {"l.qzeros", {"I32", {kGroups, kOut / 8}, words(qzeros)}},
          {"l.scales", {"F16", {kGroups, kOut}, scalesBytes()}},
          {"l.g_idx", {"I32", {kIn}, words(gIdx)}},
          {"norm.weight", {"F32", {2}, std::string(8, '\0')}}};
}

// AWQ: qweight [in, out/8] and qzeros [groups, out/8], output o as value j with o % 8 = order[j].
std::map<std::string, Tensor> awqLinear() {
  std::vector<uint32_t> qweight(kIn * kOut / 8, 0), qzeros(kGroups * kOut / 8, 0);
  for (int64_t o = 0; o < kOut; ++o) {
    int j = 0;
    while (kAwqOrder[j] != o % 8)
      ++j;
    for (int64_t k = 0; k < kIn; ++k)
      qweight[k * (kOut / 8) + o / 8] |= uint32_t(q(k, o)) << (4 * j);
    for (int64_t g = 0; g < kGroups; ++g)
      qzeros[g * (kOut / 8) + o / 8] |= uint32_t(zeroOf(g, o, false)) << (4 * j);
  }
  return {{"l.qweight", {"I32", {kIn, kOut / 8}, words(qweight)}},
          {"l.qzeros", {"I32", {kGroups, kOut / 8}, words(qzeros)}},
          {"l.scales", {"F16", {kGroups, kOut}, scalesBytes()}}};
}

HfQuantization gptq(bool symmetric) {
  HfQuantization quantization;
  quantization.method = HfQuantization::Method::kGptq;
  quantization.groupSize = kGroup;
  quantization.symmetric = symmetric;
  quantization.zerosMinusOne = true;
  return quantization;
}

HfQuantization awq() {
  HfQuantization quantization;
  quantization.method = HfQuantization::Method::kAwq;
  quantization.groupSize = kGroup;
  return quantization;
}

// readF32 is scale * (q - zero) for every weight; readPacked holds the same values.
void expectWeights(const HfQuantizedCheckpoint &checkpoint, bool symmetric, QuantFormat format) {
  auto info = checkpoint.info("l.weight");
  ASSERT_TRUE(info.isOk()) << info.status().toString();
  EXPECT_EQ((*info)->shape, (std::vector<int64_t>{kOut, kIn}));
  ASSERT_TRUE((*info)->packed.has_value());
  EXPECT_EQ((*info)->packed->format, format);
  EXPECT_EQ((*info)->packed->groupSize, kGroup);
  auto values = checkpoint.readF32("l.weight");
  ASSERT_TRUE(values.isOk()) << values.status().toString();
  auto packed = checkpoint.readPacked("l.weight");
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  for (int64_t o = 0; o < kOut; ++o)
    for (int64_t k = 0; k < kIn; ++k) {
      const int64_t g = k / kGroup;
      const float expected = f16ToF32(scaleOf(g, o)) * float(q(k, o) - zeroOf(g, o, symmetric));
      EXPECT_EQ((*values)[size_t(o * kIn + k)], expected) << o << " " << k;
      EXPECT_EQ(dequantizedWeight(*packed, o, k) + 0.0f, expected + 0.0f) << o << " " << k;
    }
}

TEST_F(HfQuantizedCheckpointTest, SymmetricGptqIsQ4AndHidesItsParts) {
  write(gptqLinear(true));
  auto checkpoint = open(gptq(true));
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  EXPECT_EQ((*checkpoint)->names(), (std::vector<std::string>{"l.weight", "norm.weight"}));
  EXPECT_TRUE((*checkpoint)->contains("norm.weight"));
  EXPECT_FALSE((*checkpoint)->contains("l.qweight"));
  expectWeights(**checkpoint, true, QuantFormat::kQ4);
}

TEST_F(HfQuantizedCheckpointTest, AsymmetricGptqIsQ4Zero) {
  write(gptqLinear(false));
  auto checkpoint = open(gptq(false));
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  expectWeights(**checkpoint, false, QuantFormat::kQ4Zero);
}

TEST_F(HfQuantizedCheckpointTest, AwqIsQ4Zero) {
  write(awqLinear());
  auto checkpoint = open(awq());
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  expectWeights(**checkpoint, false, QuantFormat::kQ4Zero);
}

// A symmetric config over zero points other than 8 is refused when the weights are read.
TEST_F(HfQuantizedCheckpointTest, SymmetricConfigOverOtherZerosIsRefused) {
  write(gptqLinear(false));
  auto checkpoint = open(gptq(true));
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  auto packed = (*checkpoint)->readPacked("l.weight");
  ASSERT_FALSE(packed.isOk());
  EXPECT_NE(packed.status().message().find("'l.qzeros': zero point"), std::string::npos)
      << packed.status().message();
}

TEST_F(HfQuantizedCheckpointTest, LayoutErrorsNameTheTensor) {
  struct Case {
    std::string name;
    std::function<void(std::map<std::string, Tensor> &)> edit;
    std::string expected;
  };
  const Case cases[] = {
      {"no qzeros", [](auto &t) { t.erase("l.qzeros"); }, "'l.qweight' has no 'l.qzeros'"},
      {"scales shape",
       [](auto &t) {
         t["l.scales"].shape = {kGroups * 2, kOut / 2};
       },
       "tensor 'l.scales' is F16 [4, 8]"},
      {"act order",
       [](auto &t) {
         std::vector<uint32_t> gIdx(kIn);
         for (int64_t k = 0; k < kIn; ++k)
           gIdx[k] = uint32_t(k % kGroups);
         t["l.g_idx"].bytes = words(gIdx);
       },
       "act-order (desc_act) GPTQ checkpoints are not supported"},
  };
  for (const Case &c : cases) {
    std::map<std::string, Tensor> tensors = gptqLinear(true);
    c.edit(tensors);
    write(tensors);
    auto checkpoint = open(gptq(true));
    ASSERT_FALSE(checkpoint.isOk()) << c.name;
    EXPECT_NE(checkpoint.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << checkpoint.status().message();
  }
}

} // namespace
} // namespace kiln::compiler
