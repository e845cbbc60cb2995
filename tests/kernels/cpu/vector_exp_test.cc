// expF32x4 against std::exp (glibc, correctly rounded to within 1 ulp) over the whole input range.
#include "kernels/cpu/vector_exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace kiln::kernels::cpu {
namespace {

float expLane(float x, int lane) {
  F32x4 v = {0.0f, 0.0f, 0.0f, 0.0f};
  v[lane] = x;
  return expF32x4(v)[lane];
}

int64_t ulpDistance(float a, float b) {
  return std::abs(static_cast<int64_t>(std::bit_cast<int32_t>(a)) - std::bit_cast<int32_t>(b));
}

// Every 97th float bit pattern between the smallest and largest inputs with a normal result,
// both signs (about 11 million inputs), in a lane that changes with the input.
TEST(VectorExpTest, WithinTwoUlpOfStdExpWhereTheResultIsNormal) {
  int64_t worst = 0;
  float worstInput = 0.0f;
  int lane = 0;
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += 97) {
    for (float x : {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)}) {
      if (x > 88.72283172607421875f || x < -87.33654022216797f)
        continue;
      const int64_t ulps = ulpDistance(expLane(x, lane), std::exp(x));
      if (ulps > worst) {
        worst = ulps;
        worstInput = x;
      }
      lane = (lane + 1) % 4;
    }
  }
  std::printf("worst: %lld ulp at x = %.9g\n", static_cast<long long>(worst), worstInput);
  EXPECT_LE(worst, 2) << "at x = " << worstInput;
}

TEST(VectorExpTest, EdgesGiveInfinityZeroAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const F32x4 big = expF32x4(F32x4{88.8f, 1000.0f, inf, 88.72283172607421875f});
  EXPECT_EQ(big[0], inf);
  EXPECT_EQ(big[1], inf);
  EXPECT_EQ(big[2], inf);
  EXPECT_TRUE(std::isfinite(big[3]));
  const F32x4 small = expF32x4(F32x4{-87.4f, -1000.0f, -inf, 0.0f});
  EXPECT_EQ(small[0], 0.0f);
  EXPECT_EQ(small[1], 0.0f);
  EXPECT_EQ(small[2], 0.0f);
  EXPECT_EQ(small[3], 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(expF32x4(F32x4{nan, 0.0f, 0.0f, 0.0f})[0]));
  EXPECT_EQ(expLane(-0.0f, 2), 1.0f);
}

} // namespace
} // namespace kiln::kernels::cpu
