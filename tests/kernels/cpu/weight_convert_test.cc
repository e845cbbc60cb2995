#include "kernels/cpu/weight_convert.h"

#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

// The vectorised widening must be bit-identical to the scalar reference for all 65536 patterns
// (normals, subnormals, zeros, infinities, NaN payloads, both signs).
TEST(WeightConvertTest, F16MatchesScalarConversionForEveryBitPattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(all.size());
  f16RunToF32(all.data(), static_cast<int64_t>(all.size()), got.data());
  for (uint32_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(f16ToF32(all[i])))
        << "fp16 bits 0x" << std::hex << i;
}

TEST(WeightConvertTest, BF16MatchesScalarConversionForEveryBitPattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(all.size());
  bf16RunToF32(all.data(), static_cast<int64_t>(all.size()), got.data());
  for (uint32_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(bf16ToF32(all[i])))
        << "bf16 bits 0x" << std::hex << i;
}

TEST(WeightConvertTest, RunStartsAtElementOffset) {
  const std::vector<uint16_t> halves = {0x3c00, 0x4000, 0x4200, 0xc400}; // 1, 2, 3, -4 in fp16
  float got[2] = {0.0f, 0.0f};
  weightRunToF32(halves.data(), WeightType::kF16, 2, 2, got);
  EXPECT_EQ(got[0], 3.0f);
  EXPECT_EQ(got[1], -4.0f);
  const std::vector<float> floats = {1.5f, -2.5f, 7.0f};
  weightRunToF32(floats.data(), WeightType::kF32, 1, 2, got);
  EXPECT_EQ(got[0], -2.5f);
  EXPECT_EQ(got[1], 7.0f);
}

} // namespace
} // namespace kiln::kernels::cpu
