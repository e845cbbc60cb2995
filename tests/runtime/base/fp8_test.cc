// fp8 E4M3 conversions (runtime/base/fp8.h) against the OCP 8-bit floating point spec's table of
// values, written out here from its definition (bias 7, subnormals m x 2^-9, S.1111.111 NaN),
// and the rounding: nearest even at every midpoint, saturation at +-448. (The kernels' widening:
// tests/kernels/cpu/half_kernels_test.cc.)
#include "runtime/base/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kiln {
namespace {

// The spec's value of code b, in double.
double specValue(int b) {
  const int sign = b >> 7, exponent = (b >> 3) & 15, mantissa = b & 7;
  const double magnitude = exponent == 0 ? mantissa * std::ldexp(1.0, -9)
                                         : (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

TEST(Fp8Test, EveryCodeDecodesToTheSpecValue) {
  for (int b = 0; b < 256; ++b) {
    const float value = f8e4m3ToF32(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value)) << b;
      continue;
    }
    EXPECT_EQ(double(value), specValue(b)) << b;
    EXPECT_EQ(f32ToF8E4M3(value), b == 0x80 ? 0x80 : b) << b; // -0 stays -0
  }
  EXPECT_EQ(f8e4m3ToF32(0x7E), 448.0f);
  EXPECT_EQ(f8e4m3ToF32(0x01), 0x1p-9f);
}

// Between two neighbouring codes: below the midpoint the lower, above it the upper, at it the one
// with an even mantissa.
TEST(Fp8Test, RoundsToNearestEven) {
  for (int b = 0; b < 0x7E; ++b) {
    const double lo = specValue(b), hi = specValue(b + 1), mid = (lo + hi) / 2;
    const float below = static_cast<float>(mid - (hi - lo) / 8);
    const float above = static_cast<float>(mid + (hi - lo) / 8);
    EXPECT_EQ(f32ToF8E4M3(below), b) << b;
    EXPECT_EQ(f32ToF8E4M3(above), b + 1) << b;
    EXPECT_EQ(f32ToF8E4M3(static_cast<float>(mid)), (b & 1) ? b + 1 : b) << b;
    EXPECT_EQ(f32ToF8E4M3(-below), 0x80 | b) << b;
  }
}

TEST(Fp8Test, SaturatesAndKeepsNan) {
  for (float f : {448.0f, 463.9f, 464.0f, 1e6f, INFINITY})
    EXPECT_EQ(f32ToF8E4M3(f), 0x7E) << f;
  EXPECT_EQ(f32ToF8E4M3(-1e6f), 0xFE);
  EXPECT_EQ(f32ToF8E4M3(NAN), 0x7F);
  EXPECT_EQ(f32ToF8E4M3(0x1p-11f), 0x00); // below half the smallest subnormal
}

} // namespace
} // namespace kiln
