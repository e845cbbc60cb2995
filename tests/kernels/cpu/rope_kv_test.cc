#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

struct RopeShape {
  int32_t numHeads, numKvHeads, headDim, rotaryDim, blockSize;
};

// transformers: inv_freq = 1 / theta^(arange(0, dim, 2) / dim), in fp32.
std::vector<float> llamaInvFreq(int32_t rotaryDim, float theta) {
  std::vector<float> invFreq(rotaryDim / 2);
  for (int32_t i = 0; i < rotaryDim / 2; ++i)
    invFreq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / rotaryDim);
  return invFreq;
}

// Reference rotation: the angle is the fp32 product (as transformers computes it); cos, sin and
// the rotation itself in double.
std::vector<double> rotateReference(const float *x, int32_t position,
                                    const std::vector<float> &invFreq, const RopeShape &s) {
  const int32_t half = s.rotaryDim / 2;
  std::vector<double> out(x, x + s.headDim);
  for (int32_t i = 0; i < half; ++i) {
    const double angle = static_cast<float>(position) * invFreq[i];
    out[i] = x[i] * std::cos(angle) - x[i + half] * std::sin(angle);
    out[i + half] = x[i + half] * std::cos(angle) + x[i] * std::sin(angle);
  }
  return out;
}

constexpr float kSentinel = -777.25f;
constexpr double kTolerance = 2e-6; // absolute, on values in [-1, 1]

void checkShape(const RopeShape &s, uint32_t seed) {
  const int32_t numTokens = 11;
  const int32_t numBlocks = numTokens + 3; // at least one spare slot per token, even at blockSize 1
  const int64_t qkvWidth = static_cast<int64_t>(s.numHeads + 2 * s.numKvHeads) * s.headDim;
  const auto qkv = randomFloats(numTokens * qkvWidth, seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> positions(numTokens), slots(numBlocks * s.blockSize);
  for (int32_t &p : positions)
    p = std::uniform_int_distribution<int32_t>(0, 8000)(rng);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(numTokens);
  slots[4] = -1; // padding token: rotates q, writes no cache slot
  const auto invFreq = llamaInvFreq(s.rotaryDim, 10000.0f);
  const size_t cacheSize = static_cast<size_t>(numBlocks) * s.numKvHeads * s.blockSize * s.headDim;
  std::vector<float> kCache(cacheSize, kSentinel), vCache(cacheSize, kSentinel);
  std::vector<float> q(static_cast<size_t>(numTokens) * s.numHeads * s.headDim);
  ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(), kCache.data(),
               vCache.data(), numTokens, s.numHeads, s.numKvHeads, s.headDim, s.rotaryDim,
               s.blockSize});

  std::vector<bool> written(cacheSize, false);
  for (int32_t t = 0; t < numTokens; ++t) {
    const float *row = qkv.data() + t * qkvWidth;
    for (int32_t h = 0; h < s.numHeads; ++h) {
      const auto expected = rotateReference(row + h * s.headDim, positions[t], invFreq, s);
      for (int32_t d = 0; d < s.headDim; ++d)
        ASSERT_NEAR(q[(t * s.numHeads + h) * s.headDim + d], expected[d], kTolerance)
            << "q token " << t << " head " << h << " dim " << d;
    }
    if (slots[t] < 0)
      continue;
    const int64_t block = slots[t] / s.blockSize, offset = slots[t] % s.blockSize;
    for (int32_t h = 0; h < s.numKvHeads; ++h) {
      const float *k = row + (s.numHeads + h) * s.headDim;
      const float *v = row + (s.numHeads + s.numKvHeads + h) * s.headDim;
      const auto expectedK = rotateReference(k, positions[t], invFreq, s);
      const int64_t base = ((block * s.numKvHeads + h) * s.blockSize + offset) * s.headDim;
      for (int32_t d = 0; d < s.headDim; ++d) {
        ASSERT_NEAR(kCache[base + d], expectedK[d], kTolerance) << "k token " << t << " dim " << d;
        ASSERT_EQ(vCache[base + d], v[d]) << "v token " << t << " dim " << d;
        written[base + d] = true;
      }
    }
  }
  for (size_t i = 0; i < cacheSize; ++i)
    if (!written[i]) {
      ASSERT_EQ(std::bit_cast<uint32_t>(kCache[i]), std::bit_cast<uint32_t>(kSentinel)) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(vCache[i]), std::bit_cast<uint32_t>(kSentinel)) << i;
    }
}

TEST(RopeKvWriteTest, RotatesAndWritesSlotsOverShapeGrid) {
  const std::pair<int32_t, int32_t> headCounts[] = {{4, 4}, {8, 2}, {4, 1}};
  uint32_t seed = 700;
  for (auto [heads, kvHeads] : headCounts)
    for (int32_t headDim : {8, 16, 32, 64})
      for (int32_t blockSize : {1, 4, 16}) {
        const RopeShape shape{heads, kvHeads, headDim, headDim, blockSize};
        SCOPED_TRACE(::testing::Message() << "heads=" << heads << "/" << kvHeads
                                          << " headDim=" << headDim << " block=" << blockSize);
        checkShape(shape, ++seed);
      }
}

// Partial rotary: only the first rotaryDim dims rotate (pairs i, i + rotaryDim/2); the rest pass.
TEST(RopeKvWriteTest, PartialRotaryLeavesTailDimsUnrotated) {
  for (auto [headDim, rotaryDim] : {std::pair{32, 16}, std::pair{64, 24}}) {
    SCOPED_TRACE(::testing::Message() << "headDim=" << headDim << " rotaryDim=" << rotaryDim);
    checkShape({8, 2, headDim, rotaryDim, 4}, 800 + headDim);
  }
}

TEST(RopeKvWriteTest, PositionZeroIsIdentity) {
  const RopeShape s{2, 1, 8, 8, 2};
  const auto qkv = randomFloats(4 * 8, 900);
  const std::vector<int32_t> positions = {0}, slots = {3};
  const auto invFreq = llamaInvFreq(8, 500000.0f);
  std::vector<float> q(16), kCache(32, 0.0f), vCache(32, 0.0f);
  ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(), kCache.data(),
               vCache.data(), 1, s.numHeads, s.numKvHeads, s.headDim, s.rotaryDim, s.blockSize});
  EXPECT_TRUE(std::equal(q.begin(), q.end(), qkv.begin()));
  // slot 3 = block 1, offset 1 -> floats [24, 32)
  EXPECT_TRUE(std::equal(kCache.begin() + 24, kCache.end(), qkv.begin() + 16));
  EXPECT_TRUE(std::equal(vCache.begin() + 24, vCache.end(), qkv.begin() + 24));
}

} // namespace
} // namespace kiln::kernels::cpu
