// elem_io.h's bf16 runs at every instruction-set level of this CPU (from avx512 up they go 16 lanes
// at a time, kernels/cpu/bf16_runs_avx512.cc): bit-identical to the scalar kiln::bf16ToF32 /
// kiln::f32ToBf16 for every bf16 pattern, every rounding case around each, and every length
// (whole vectors and masked tails), never touching an element outside the run.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elem_io.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

class Bf16RunTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

TEST_P(Bf16RunTest, WidensEveryPatternAsTheScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(all.size() + 1, 0.0f);
  loadRun(all.data(), ElemType::kBF16, 1, int64_t(all.size()) - 1, got.data());
  for (uint32_t i = 1; i < all.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i - 1]), std::bit_cast<uint32_t>(bf16ToF32(all[i])))
        << "bf16 bits 0x" << std::hex << i;
  EXPECT_EQ(got[all.size() - 1], 0.0f) << "wrote past the run";
}

// Each bf16 pattern's fp32 value and its neighbours: one below and above the halfway point, the
// ties themselves (even and odd kept bit), the largest value rounding down, NaN payloads.
std::vector<uint32_t> roundingCases() {
  std::vector<uint32_t> bits;
  for (uint32_t top = 0; top < 65536; ++top)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      bits.push_back((top << 16) | low);
  return bits;
}

TEST_P(Bf16RunTest, RoundsEveryCaseAsTheScalar) {
  const std::vector<uint32_t> bits = roundingCases();
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    values[i] = std::bit_cast<float>(bits[i]);
  std::vector<uint16_t> got(values.size(), 0xdead);
  storeRun(values.data(), int64_t(values.size()), got.data(), ElemType::kBF16, 0);
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(got[i], f32ToBf16(values[i])) << "fp32 bits 0x" << std::hex << bits[i];
}

// Lengths 0..40 at odd offsets: whole 16-lane groups, masked tails, runs too short to vectorise.
TEST_P(Bf16RunTest, EveryLengthTouchesOnlyItsRun) {
  std::vector<float> values(48);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 1.0f + 0.0078125f * float(i) + 0.00001f; // rounds, not exact in bf16
  for (int64_t n = 0; n <= 40; ++n) {
    SCOPED_TRACE(n);
    std::vector<uint16_t> halves(50, 0xbeef);
    storeRun(values.data(), n, halves.data(), ElemType::kBF16, 3);
    for (int64_t i = 0; i < 50; ++i)
      ASSERT_EQ(halves[i], i >= 3 && i < 3 + n ? f32ToBf16(values[i - 3]) : 0xbeef) << i;
    std::vector<float> widened(50, -7.0f);
    loadRun(halves.data(), ElemType::kBF16, 3, n, widened.data() + 1);
    for (int64_t i = 0; i < 50; ++i)
      ASSERT_EQ(widened[i], i >= 1 && i < 1 + n ? bf16ToF32(halves[i + 2]) : -7.0f) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, Bf16RunTest, ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

} // namespace
} // namespace kiln::kernels::cpu
