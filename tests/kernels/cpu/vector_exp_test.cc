// expF32x4 and the fused multiply-add e^x of the wider levels (exp_fma_lanes.inc from avx512 up,
// exp_fma_avx2.inc at avx2, through silu_row.h's expFmaRunAvx512 / expFmaRunAvx2) against std::exp
// (glibc, correctly rounded to within 1 ulp) over the whole input range.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/silu_row.h"
#include "kernels/cpu/vector_exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

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

// A fused multiply-add e^x run (16 or 8 lanes at a time, the input's lane changing with it) over
// the same inputs, and its edges.
using ExpRun = void (*)(const float *, int64_t, float *);
void expectFmaRunWithinTwoUlpAndTheSameEdges(ExpRun run) {
  std::vector<float> inputs, outputs;
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += 97)
    for (float x : {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)})
      if (x <= 88.72283172607421875f && x >= -87.33654022216797f)
        inputs.push_back(x);
  outputs.resize(inputs.size());
  run(inputs.data(), int64_t(inputs.size()), outputs.data());
  int64_t worst = 0;
  float worstInput = 0.0f;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t ulps = ulpDistance(outputs[i], std::exp(inputs[i]));
    if (ulps > worst) {
      worst = ulps;
      worstInput = inputs[i];
    }
  }
  std::printf("worst: %lld ulp at x = %.9g\n", static_cast<long long>(worst), worstInput);
  EXPECT_LE(worst, 2) << "at x = " << worstInput;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {88.8f, 1000.0f, inf, 88.72283172607421875f, -87.4f, -1000.0f,
                                    -inf,  0.0f,    nan};
  std::vector<float> out(edges.size());
  run(edges.data(), int64_t(edges.size()), out.data());
  EXPECT_EQ(out[0], inf);
  EXPECT_EQ(out[1], inf);
  EXPECT_EQ(out[2], inf);
  EXPECT_TRUE(std::isfinite(out[3]));
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 0.0f);
  EXPECT_EQ(out[7], 1.0f);
  EXPECT_TRUE(std::isnan(out[8]));
}

// A CPU without AVX-512 has no such level to run it at.
TEST(VectorExpTest, FmaLanesWithinTwoUlpAndTheSameEdges) {
  if (detectedCpuIsa() < CpuIsa::kAvx512) {
    std::printf("no avx512 level on this CPU: expFmaLanes is not used here\n");
    return;
  }
  expectFmaRunWithinTwoUlpAndTheSameEdges(expFmaRunAvx512);
}

// Every x86-64 CPU with AVX2 and FMA (the avx2 level) runs it.
TEST(VectorExpTest, FmaEightLanesWithinTwoUlpAndTheSameEdges) {
  if (detectedCpuIsa() < CpuIsa::kAvx2) {
    std::printf("no avx2 level on this CPU: expFma8 is not used here\n");
    return;
  }
  expectFmaRunWithinTwoUlpAndTheSameEdges(expFmaRunAvx2);
}

} // namespace
} // namespace kiln::kernels::cpu
