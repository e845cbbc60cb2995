#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

// Relative tolerance 1e-6 (one expf and a division), floor 1e-7 near zero.
TEST(SiluMulTest, MatchesDoubleReference) {
  uint32_t seed = 400;
  for (int32_t rows : {1, 3, 17, 64})
    for (int32_t intermediate : {8, 64, 96, 130}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " intermediate=" << intermediate);
      auto gateUp = randomFloats(static_cast<size_t>(rows) * 2 * intermediate, ++seed, -8, 8);
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
TEST(SiluMulTest, SaturatesWithoutNaN) {
  const std::vector<float> gateUp = {-100.0f, 100.0f, -1e30f, 0.0f, 2.0f, 2.0f, 2.0f, 2.0f};
  std::vector<float> out(4);
  siluMul({gateUp.data(), out.data(), 1, 4});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 200.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
}

// The 16-lane row (AVX-512 levels) does the 4-lane row's operations: the same bits at every
// level this CPU has, including the partial last group and both activation types.
TEST(SiluMulTest, EveryLevelGivesTheSameBits) {
  const int32_t rows = 5, intermediate = 37;
  const auto gateUp = randomFloats(size_t(rows) * 2 * intermediate, 77, -30, 30);
  std::vector<uint16_t> halves(gateUp.size());
  for (size_t i = 0; i < gateUp.size(); ++i)
    halves[i] = f32ToBf16(gateUp[i]);
  auto run = [&](CpuIsa isa, bool half) {
    EXPECT_TRUE(setCpuIsa(isa));
    std::vector<float> out(size_t(rows) * intermediate);
    std::vector<uint16_t> outHalves(out.size());
    if (half)
      siluMul({halves.data(), outHalves.data(), rows, intermediate, ElemType::kBF16});
    else
      siluMul({gateUp.data(), out.data(), rows, intermediate});
    setCpuIsa(detectedCpuIsa());
    for (size_t i = 0; half && i < out.size(); ++i)
      out[i] = bf16ToF32(outHalves[i]);
    return out;
  };
  for (bool half : {false, true})
    for (CpuIsa isa : availableCpuIsas())
      EXPECT_TRUE(testing::bitwiseEqual(run(isa, half), run(CpuIsa::kSse2, half)))
          << cpuIsaName(isa) << (half ? " bf16" : " fp32");
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
