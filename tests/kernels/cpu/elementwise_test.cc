#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

// Each SiLU test at every instruction-set level of this CPU (16 lanes with fused multiply-adds
// from avx512 up, 8 at avx2, kernels/cpu/silu_row.h; the baseline's 4 lanes below that), the
// detected one put back after.
class SiluMulTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

// Relative tolerance 1e-6 (one expf within 2 ulp and a division), floor 1e-7 near zero. Widths
// below, at and past 16-lane groups, with partial last groups.
TEST_P(SiluMulTest, MatchesDoubleReference) {
  uint32_t seed = 400;
  for (int32_t rows : {1, 3, 17, 64})
    for (int32_t intermediate : {8, 16, 37, 64, 96, 130}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " intermediate=" << intermediate);
      auto gateUp = randomFloats(static_cast<size_t>(rows) * 2 * intermediate, ++seed, -30, 30);
      std::vector<float> out(static_cast<size_t>(rows) * intermediate);
      siluMul({gateUp.data(), out.data(), rows, intermediate});
      for (int32_t r = 0; r < rows; ++r)
        for (int32_t i = 0; i < intermediate; ++i) {
          const double g = gateUp[r * 2 * intermediate + i];
          const double u = gateUp[r * 2 * intermediate + intermediate + i];
          const double expected = g / (1.0 + std::exp(-g)) * u;
          ASSERT_NEAR(out[r * intermediate + i], expected, 1e-6 * std::fabs(expected) + 1e-7);
        }
    }
}

// exp(-x) overflows for very negative x; the result must be a (signed) zero, never NaN.
TEST_P(SiluMulTest, SaturatesWithoutNaN) {
  const std::vector<float> gateUp = {-100.0f, 100.0f, -1e30f, 0.0f, 2.0f, 2.0f, 2.0f, 2.0f};
  std::vector<float> out(4);
  siluMul({gateUp.data(), out.data(), 1, 4});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 200.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
}

// bf16 rows (widened and rounded in registers from avx2 up) give their fp32 rows' results
// rounded, at every level, partial last group included; a row's bits do not depend on the rows
// around it.
TEST_P(SiluMulTest, Bf16RowsAreTheirFp32RowsRounded) {
  const int32_t rows = 5, intermediate = 37;
  const auto gateUp = randomFloats(size_t(rows) * 2 * intermediate, 77, -30, 30);
  std::vector<uint16_t> halves(gateUp.size());
  std::vector<float> widened(gateUp.size());
  for (size_t i = 0; i < gateUp.size(); ++i) {
    halves[i] = f32ToBf16(gateUp[i]);
    widened[i] = bf16ToF32(halves[i]);
  }
  std::vector<float> out(size_t(rows) * intermediate);
  siluMul({widened.data(), out.data(), rows, intermediate});
  std::vector<uint16_t> outHalves(out.size());
  siluMul({halves.data(), outHalves.data(), rows, intermediate, ElemType::kBF16});
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(outHalves[i], f32ToBf16(out[i])) << "element " << i;
  std::vector<uint16_t> lastAlone(intermediate);
  siluMul({halves.data() + size_t(rows - 1) * 2 * intermediate, lastAlone.data(), 1, intermediate,
           ElemType::kBF16});
  EXPECT_TRUE(std::equal(lastAlone.begin(), lastAlone.end(),
                         outHalves.begin() + size_t(rows - 1) * intermediate));
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, SiluMulTest, ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

// GeGLU: gelu_tanh(g) * up against the double formula, fp32 and bf16 (a bf16 row is its widened
// fp32 row rounded once). Relative 1e-6: a tanhf and a few float operations.
TEST(GeluTanhMulTest, MatchesDoubleReference) {
  uint32_t seed = 700;
  for (int32_t rows : {1, 3, 17})
    for (int32_t intermediate : {8, 37, 130}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " intermediate=" << intermediate);
      auto gateUp = randomFloats(static_cast<size_t>(rows) * 2 * intermediate, ++seed, -12, 12);
      std::vector<float> out(static_cast<size_t>(rows) * intermediate);
      geluTanhMul({gateUp.data(), out.data(), rows, intermediate});
      for (int32_t r = 0; r < rows; ++r)
        for (int32_t i = 0; i < intermediate; ++i) {
          const double g = gateUp[r * 2 * intermediate + i];
          const double u = gateUp[r * 2 * intermediate + intermediate + i];
          const double inner = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
          const double expected = 0.5 * g * (1.0 + std::tanh(inner)) * u;
          ASSERT_NEAR(out[r * intermediate + i], expected, 1e-6 * std::fabs(expected) + 1e-6);
        }
      std::vector<uint16_t> halves(gateUp.size()), outHalves(out.size());
      for (size_t i = 0; i < gateUp.size(); ++i)
        halves[i] = f32ToBf16(gateUp[i]), gateUp[i] = bf16ToF32(halves[i]);
      geluTanhMul({gateUp.data(), out.data(), rows, intermediate});
      geluTanhMul({halves.data(), outHalves.data(), rows, intermediate, ElemType::kBF16});
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(outHalves[i], f32ToBf16(out[i])) << "element " << i;
    }
}

// tanh(x / cap) * cap, in place too; saturates at +-cap without NaN.
TEST(SoftcapTest, MatchesDoubleReferenceInPlace) {
  for (int64_t count : {int64_t{1}, int64_t{1025}, int64_t{70000}}) {
    auto x = randomFloats(count, 800, -100, 100);
    const std::vector<float> original = x;
    softcap({x.data(), x.data(), count, 30.0f});
    for (int64_t i = 0; i < count; ++i)
      ASSERT_NEAR(x[i], std::tanh(double(original[i]) / 30.0) * 30.0, 4e-6)
          << "count " << count << " index " << i;
  }
  std::vector<float> big = {1e30f, -1e30f, 0.0f};
  softcap({big.data(), big.data(), 3, 5.0f});
  EXPECT_EQ(big[0], 5.0f);
  EXPECT_EQ(big[1], -5.0f);
  EXPECT_EQ(big[2], 0.0f);
}

TEST(GeluTest, MatchesDoubleErfReferenceInPlace) {
  for (int64_t count : {int64_t{1}, int64_t{1025}, int64_t{70000}}) {
    auto x = randomFloats(count, 900, -12, 12);
    const std::vector<float> original = x;
    gelu({x.data(), x.data(), count});
    for (int64_t i = 0; i < count; ++i) {
      const double v = original[i];
      ASSERT_NEAR(x[i], 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))), 2e-6 * (1 + std::fabs(v)))
          << "count " << count << " index " << i;
    }
  }
}

// Qwen2-MoE's shared-expert gate: a + sigmoid(x . w) * b per row against double, gates from ~0
// to ~1 (x . w of standard deviation ~2.7), rows past the parallel threshold; a bf16 row is its
// widened fp32 row rounded once. Tolerance: fp32 dot of up to 1000 terms, relative 1e-5 of the
// magnitudes.
TEST(SigmoidGatedAddTest, MatchesDoubleReference) {
  uint32_t seed = 1000;
  for (int32_t rows : {1, 3, 70})
    for (int32_t width : {1, 64, 1000}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " width=" << width);
      const size_t n = size_t(rows) * width;
      auto a = randomFloats(n, ++seed, -2, 2), b = randomFloats(n, ++seed, -2, 2);
      auto x = randomFloats(n, ++seed, -1, 1);
      const float reach = 8.0f / std::sqrt(float(width)); // x . w of spread ~2.7
      const auto w = randomFloats(width, ++seed, -reach, reach);
      std::vector<float> y(n);
      sigmoidGatedAdd({a.data(), b.data(), x.data(), w.data(), y.data(), rows, width});
      double lowest = 1, highest = 0;
      for (int32_t r = 0; r < rows; ++r) {
        double dot = 0, magnitude = 0;
        for (int32_t i = 0; i < width; ++i) {
          dot += double(x[r * width + i]) * w[i];
          magnitude += std::fabs(double(x[r * width + i]) * w[i]);
        }
        const double gate = 1.0 / (1.0 + std::exp(-dot));
        lowest = std::min(lowest, gate), highest = std::max(highest, gate);
        for (int32_t i = 0; i < width; ++i) {
          const size_t k = size_t(r) * width + i;
          const double expected = a[k] + gate * b[k];
          ASSERT_NEAR(y[k], expected, 1e-5 * (std::fabs(a[k]) + std::fabs(b[k]) * (1 + magnitude)))
              << "row " << r << " i " << i;
        }
      }
      if (rows == 70 && width > 1)
        EXPECT_TRUE(lowest < 0.1 && highest > 0.9) << lowest << " " << highest;
      std::vector<uint16_t> ha(n), hb(n), hx(n), hy(n);
      for (size_t i = 0; i < n; ++i) {
        ha[i] = f32ToBf16(a[i]), a[i] = bf16ToF32(ha[i]);
        hb[i] = f32ToBf16(b[i]), b[i] = bf16ToF32(hb[i]);
        hx[i] = f32ToBf16(x[i]), x[i] = bf16ToF32(hx[i]);
      }
      sigmoidGatedAdd({a.data(), b.data(), x.data(), w.data(), y.data(), rows, width});
      sigmoidGatedAdd(
          {ha.data(), hb.data(), hx.data(), w.data(), hy.data(), rows, width, ElemType::kBF16});
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hy[i], f32ToBf16(y[i])) << "element " << i;
    }
}

TEST(AddTest, AddsElementwiseExactly) {
  for (int64_t count : {int64_t{1}, int64_t{130}, int64_t{100000}}) {
    const auto a = randomFloats(count, 500), b = randomFloats(count, 501);
    std::vector<float> out(count);
    add({a.data(), b.data(), out.data(), count});
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(out[i], a[i] + b[i]) << "count " << count << " index " << i;
  }
}

TEST(GatherRowsTest, GathersRequestedRowsInOrder) {
  const int32_t rows = 6, width = 130;
  const auto x = randomFloats(static_cast<size_t>(rows) * width, 600);
  const std::vector<int32_t> indices = {5, 0, 0, 3};
  std::vector<float> out(indices.size() * width);
  gatherRows({x.data(), indices.data(), out.data(), 4, width});
  for (int32_t i = 0; i < 4; ++i)
    for (int32_t j = 0; j < width; ++j)
      ASSERT_EQ(out[i * width + j], x[indices[i] * width + j]) << "row " << i;
}

} // namespace
} // namespace kiln::kernels::cpu
