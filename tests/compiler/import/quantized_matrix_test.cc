// Round-to-nearest quantization, slices, stacking and the artifact byte layout of a quantized
// matrix (compiler/import/quantized_matrix.h, runtime/base/quant_layout.h). Expected values are
// worked out by hand from the definitions in those headers.
#include "compiler/import/quantized_matrix.h"

#include "runtime/base/fp8.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::compiler {
namespace {

std::vector<float> ramp(int64_t n, float step, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = start + step * static_cast<float>(i);
  return v;
}

TEST(QuantizedMatrixTest, Q8RoundsToTheStoredScale) {
  // One row of 32: amax 127 * 0.5 = 63.5 -> s = 0.5 (exact in fp16); w = 0.5 * k rounds to k.
  std::vector<float> w = ramp(32, 0.5f, -63.5f + 0.5f * 0.0f);
  w[0] = -63.5f;
  w[1] = 0.26f; // 0.52 -> 1 (nearest)
  w[2] = 0.25f; // 0.5 -> 0 (ties to even)
  w[3] = 0.75f; // 1.5 -> 2 (ties to even)
  const QuantizedMatrix m = quantizeMatrix(w, 1, 32, QuantFormat::kQ8, 32);
  EXPECT_EQ(f16ToF32(m.scales[0]), 0.5f);
  EXPECT_EQ(static_cast<int8_t>(m.values[0]), -127);
  EXPECT_EQ(static_cast<int8_t>(m.values[1]), 1);
  EXPECT_EQ(static_cast<int8_t>(m.values[2]), 0);
  EXPECT_EQ(static_cast<int8_t>(m.values[3]), 2);
  EXPECT_EQ(dequantizedWeight(m, 0, 0), -63.5f);
  EXPECT_EQ(dequantizedWeight(m, 0, 3), 1.0f);
}

TEST(QuantizedMatrixTest, Q4TakesTheSignedExtremeAsMinusEight) {
  // Largest magnitude -4 (first): s = -4 / -8 = 0.5; u = floor(w / 0.5 + 8.5).
  std::vector<float> w(32, 0.0f);
  w[5] = -4.0f;  // u = 0 (weight -4)
  w[6] = 3.4f;   // 6.8 + 8.5 = 15.3 -> 15 (weight 3.5)
  w[7] = 3.9f;   // 7.8 + 8.5 = 16.3 -> clamped to 15
  w[20] = 0.3f;  // 0.6 + 8.5 = 9.1 -> 9 (weight 0.5)
  w[31] = -0.2f; // -0.4 + 8.5 = 8.1 -> 8 (weight 0)
  const QuantizedMatrix m = quantizeMatrix(w, 1, 32, QuantFormat::kQ4, 32);
  EXPECT_EQ(f16ToF32(m.scales[0]), 0.5f);
  EXPECT_EQ(m.values[5] & 0x0F, 0); // value 5: low nibble of byte 5
  EXPECT_EQ(m.values[6] & 0x0F, 15);
  EXPECT_EQ(m.values[4] >> 4, 9);  // value 20: high nibble of byte 4
  EXPECT_EQ(m.values[15] >> 4, 8); // value 31: high nibble of byte 15
  EXPECT_EQ(dequantizedWeight(m, 0, 5), -4.0f);
  EXPECT_EQ(dequantizedWeight(m, 0, 6), 3.5f);
  EXPECT_EQ(dequantizedWeight(m, 0, 7), 3.5f);
  EXPECT_EQ(dequantizedWeight(m, 0, 20), 0.5f);
  EXPECT_EQ(dequantizedWeight(m, 0, 31), 0.0f);
}

TEST(QuantizedMatrixTest, Q4MinSpansTheGroup) {
  // min -1, max 2: s = 3 / 15 = 0.2 (fp16 0.199951171875), u = round((w + 1) / s).
  std::vector<float> w = ramp(32, 0.0f, 0.0f);
  w[0] = -1.0f;
  w[1] = 2.0f;
  const QuantizedMatrix m = quantizeMatrix(w, 1, 32, QuantFormat::kQ4Min, 32);
  const float s = f16ToF32(m.scales[0]);
  EXPECT_EQ(s, f16ToF32(f32ToF16(0.2f)));
  EXPECT_EQ(f16ToF32(m.mins[0]), -1.0f);
  EXPECT_EQ(m.values[0] & 0x0F, 0);
  EXPECT_EQ(m.values[1] & 0x0F, 15);
  EXPECT_EQ(m.values[2] & 0x0F, 5); // (0 + 1) / 0.19995 = 5.0012 -> 5
  EXPECT_EQ(dequantizedWeight(m, 0, 2), s * 5.0f + -1.0f);
}

TEST(QuantizedMatrixTest, Q4ZeroSpansTheGroupAndZero) {
  // lo = min(-1, 0), hi = max(2, 0): s = 3 / 15 (fp16 0.199951171875), zero = round(1 / s) = 5,
  // u = round(w / s) + 5.
  std::vector<float> w = ramp(32, 0.0f, 0.0f);
  w[0] = -1.0f;
  w[1] = 2.0f;
  w[2] = 0.5f;
  const QuantizedMatrix m = quantizeMatrix(w, 1, 32, QuantFormat::kQ4Zero, 32);
  const float s = f16ToF32(m.scales[0]);
  EXPECT_EQ(s, f16ToF32(f32ToF16(0.2f)));
  EXPECT_EQ(m.mins[0], 5);
  EXPECT_EQ(m.values[0] & 0x0F, 0);
  EXPECT_EQ(m.values[1] & 0x0F, 15);
  EXPECT_EQ(m.values[2] & 0x0F, 8); // round(0.5 / 0.19995) = 3, + 5
  EXPECT_EQ(m.values[3] & 0x0F, 5); // 0: the zero point, weight +0
  EXPECT_EQ(dequantizedWeight(m, 0, 2), s * 3.0f);
  EXPECT_EQ(dequantizedWeight(m, 0, 3), 0.0f);
}

TEST(QuantizedMatrixTest, Q8FloatScalesTheLargestTo448) {
  // amax 3.5: s = fp16(3.5 / 448) = 2^-7 exactly, so w / s = 128 w: 3.5 -> 448 (0x7E), 0.3 ->
  // 38.4 -> 40 (E4M3 steps of 4 between 32 and 64: 38.4 rounds to 40), -0.01 -> -1.28 -> -1.25.
  std::vector<float> w = ramp(32, 0.0f, 0.0f);
  w[0] = 3.5f;
  w[1] = 0.3f;
  w[2] = -0.01f;
  const QuantizedMatrix m = quantizeMatrix(w, 1, 32, QuantFormat::kQ8Float, 32);
  EXPECT_EQ(f16ToF32(m.scales[0]), 0x1p-7f);
  EXPECT_EQ(m.values[0], 0x7E);
  EXPECT_EQ(dequantizedWeight(m, 0, 0), 3.5f);
  EXPECT_EQ(dequantizedWeight(m, 0, 1), 40.0f * 0x1p-7f);
  EXPECT_EQ(dequantizedWeight(m, 0, 2), -1.25f * 0x1p-7f);
}

// Q8F32 keeps its scale in fp32 (what an fp8 checkpoint stores): a slice and a stack keep every
// bit of it, and the bytes hold it as the scales section (runtime/base/quant_layout.h).
TEST(QuantizedMatrixTest, Fp32ScalesSurviveSliceStackAndBytes) {
  std::vector<float> w = ramp(2 * 64, 0.013f, -0.7f);
  const QuantizedMatrix m = quantizeMatrix(w, 2, 64, QuantFormat::kQ8FloatF32, 32);
  ASSERT_EQ(m.wideScales.size(), 4u);
  EXPECT_TRUE(m.scales.empty());
  const float amax = std::max(std::fabs(w[0]), std::fabs(w[31])); // the ramp's ends
  EXPECT_EQ(m.wideScales[0], amax / 448.0f);
  EXPECT_NE(f16ToF32(f32ToF16(m.wideScales[0])), m.wideScales[0]); // fp16 would round it
  EXPECT_EQ(dequantizedWeight(m, 0, 0), m.wideScales[0] * f8e4m3ToF32(m.values[0]));
  Result<QuantizedMatrix> s = sliceQuantizedMatrix(m, 1, 3, 32, 64);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->wideScales, (std::vector<float>{m.wideScales[3], 0.0f}));
  QuantizedMatrix top = m;
  ASSERT_TRUE(appendQuantizedRows(top, m).isOk());
  EXPECT_EQ(dequantizedWeight(top, 3, 40), dequantizedWeight(m, 1, 40));
  const std::vector<uint8_t> bytes = m.bytes();
  const QuantLayout layout = quantLayout(QuantFormat::kQ8FloatF32, 2, 64, 32);
  ASSERT_EQ(bytes.size(), layout.totalBytes);
  EXPECT_EQ(layout.totalBytes, 128u + 16u);
  EXPECT_EQ(std::memcmp(bytes.data() + layout.scalesOffset, m.wideScales.data(), 16), 0);
}

TEST(QuantizedMatrixTest, ZeroGroupsHaveZeroScaleAndWeights) {
  const std::vector<float> w(64, 0.0f);
  for (QuantFormat f : {QuantFormat::kQ8, QuantFormat::kQ4, QuantFormat::kQ4Min,
                        QuantFormat::kQ4Zero, QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32}) {
    const QuantizedMatrix m = quantizeMatrix(w, 1, 64, f, 32);
    for (int64_t c = 0; c < 64; ++c)
      EXPECT_EQ(dequantizedWeight(m, 0, c), 0.0f) << quantFormatName(f);
  }
}

TEST(QuantizedMatrixTest, BytesFollowTheLayout) {
  const std::vector<float> w = ramp(3 * 64, 0.01f, -0.9f);
  const QuantizedMatrix m = quantizeMatrix(w, 3, 64, QuantFormat::kQ4Min, 32);
  const std::vector<uint8_t> bytes = m.bytes();
  const QuantLayout layout = quantLayout(QuantFormat::kQ4Min, 3, 64, 32);
  EXPECT_EQ(layout.valuesBytes, 96u);
  EXPECT_EQ(layout.scalesOffset, 128u); // 64-byte aligned sections
  EXPECT_EQ(layout.minsOffset, 192u);
  EXPECT_EQ(layout.totalBytes, 204u);
  ASSERT_EQ(bytes.size(), layout.totalBytes);
  EXPECT_EQ(std::memcmp(bytes.data(), m.values.data(), 96), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 128, m.scales.data(), 12), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 192, m.mins.data(), 12), 0);
  for (size_t i = 96; i < 128; ++i)
    EXPECT_EQ(bytes[i], 0) << i;
}

TEST(QuantizedMatrixTest, SlicesKeepWholeGroupsAndPadRowsWithZeros) {
  const std::vector<float> w = ramp(4 * 128, 0.003f, -0.7f);
  const QuantizedMatrix m = quantizeMatrix(w, 4, 128, QuantFormat::kQ4, 32);
  Result<QuantizedMatrix> s = sliceQuantizedMatrix(m, 2, 6, 64, 128);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->rows, 4);
  EXPECT_EQ(s->cols, 64);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 64; ++c)
      EXPECT_EQ(dequantizedWeight(*s, r, c), r < 2 ? dequantizedWeight(m, r + 2, c + 64) : 0.0f)
          << r << "," << c;
  EXPECT_FALSE(sliceQuantizedMatrix(m, 0, 4, 16, 128).isOk()); // splits a group
}

TEST(QuantizedMatrixTest, PerRowScalesStayPerRowInAColumnSlice) {
  const std::vector<float> w = ramp(2 * 96, 0.01f, -0.5f);
  const QuantizedMatrix m = quantizeMatrix(w, 2, 96, QuantFormat::kQ8, 96);
  Result<QuantizedMatrix> s = sliceQuantizedMatrix(m, 0, 2, 32, 96);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->groupSize, 64);
  EXPECT_EQ(s->scales, m.scales);
  for (int64_t c = 0; c < 64; ++c)
    EXPECT_EQ(dequantizedWeight(*s, 1, c), dequantizedWeight(m, 1, c + 32));
}

TEST(QuantizedMatrixTest, AppendStacksRowsOfOneForm) {
  QuantizedMatrix top = quantizeMatrix(ramp(64, 0.1f, -3.0f), 1, 64, QuantFormat::kQ8, 32);
  const QuantizedMatrix bottom =
      quantizeMatrix(ramp(128, 0.05f, 1.0f), 2, 64, QuantFormat::kQ8, 32);
  ASSERT_TRUE(appendQuantizedRows(top, bottom).isOk());
  EXPECT_EQ(top.rows, 3);
  EXPECT_EQ(dequantizedWeight(top, 2, 63), dequantizedWeight(bottom, 1, 63));
  const QuantizedMatrix other = quantizeMatrix(ramp(64, 0.1f, 0.0f), 1, 64, QuantFormat::kQ4, 32);
  EXPECT_FALSE(appendQuantizedRows(top, other).isOk());
}

} // namespace
} // namespace kiln::compiler
