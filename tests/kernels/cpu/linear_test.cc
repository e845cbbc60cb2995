#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::makeWeights;
using testing::randomFloats;
using testing::TypedWeights;

std::vector<float> runLinear(const std::vector<float> &x, const TypedWeights &w,
                             const std::vector<float> *bias, int32_t rows, int32_t in,
                             int32_t out) {
  std::vector<float> y(static_cast<size_t>(rows) * out, -12345.0f);
  LinearArgs args{x.data(), w.data(), w.type,  bias ? bias->data() : nullptr,
                  y.data(), rows,     in,      out};
  linear(args);
  return y;
}

// fp32 accumulation error grows with k: bound it by 1e-5 of sum |x*w| (a relative tolerance on
// the magnitude of the dot product's terms), plus 1e-6 absolute for the bias add.
void expectMatchesReference(const std::vector<float> &x, const TypedWeights &w,
                            const std::vector<float> *bias, const std::vector<float> &y,
                            int32_t rows, int32_t in, int32_t out) {
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t o = 0; o < out; ++o) {
      double sum = 0.0, magnitude = 0.0;
      for (int32_t i = 0; i < in; ++i) {
        const double term = static_cast<double>(x[r * in + i]) * w.values[o * in + i];
        sum += term;
        magnitude += std::fabs(term);
      }
      if (bias)
        sum += (*bias)[o];
      ASSERT_NEAR(y[r * out + o], sum, 1e-5 * magnitude + 1e-6) << "row " << r << " out " << o;
    }
  }
}

TEST(LinearTest, MatchesDoubleReferenceOverShapeGrid) {
  const WeightType types[] = {WeightType::kF32, WeightType::kF16, WeightType::kBF16};
  // 33 and 7 exercise odd output remainders, 300 crosses the 256-wide k block, 65 the row tile.
  const int32_t rowCounts[] = {1, 3, 17, 64, 65};
  const int32_t features[] = {8, 64, 96, 130, 300};
  const int32_t outCounts[] = {7, 8, 33, 64, 96, 130};
  uint32_t seed = 1;
  for (WeightType type : types)
    for (int32_t rows : rowCounts)
      for (int32_t in : features)
        for (int32_t out : outCounts) {
          SCOPED_TRACE(::testing::Message() << testing::weightTypeName(type) << " rows=" << rows
                                            << " in=" << in << " out=" << out);
          const auto x = randomFloats(static_cast<size_t>(rows) * in, ++seed);
          const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, ++seed), type);
          const auto bias = randomFloats(out, ++seed);
          const bool withBias = (seed / 3) % 2 == 0;
          const auto y = runLinear(x, w, withBias ? &bias : nullptr, rows, in, out);
          expectMatchesReference(x, w, withBias ? &bias : nullptr, y, rows, in, out);
        }
}

TEST(LinearTest, LargeDecodeShapeMatchesReference) {
  const int32_t in = 1024, out = 515;
  for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
    SCOPED_TRACE(testing::weightTypeName(type));
    const auto x = randomFloats(in, 7);
    const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, 8), type);
    const auto y = runLinear(x, w, nullptr, 1, in, out);
    expectMatchesReference(x, w, nullptr, y, 1, in, out);
  }
}

// Each row is accumulated in the same order whatever the batch: a row's output must be
// bit-identical when computed alone, at another position, or inside a larger batch.
TEST(LinearTest, RowResultsAreBitIdenticalAcrossBatchSizes) {
  const int32_t in = 300, out = 37;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16}) {
    SCOPED_TRACE(testing::weightTypeName(type));
    const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, 11), type);
    const auto bias = randomFloats(out, 12);
    const int32_t rows = 70;
    const auto x = randomFloats(static_cast<size_t>(rows) * in, 13);
    const auto batched = runLinear(x, w, &bias, rows, in, out);
    for (int32_t r : {0, 3, 63, 64, 69}) {
      const std::vector<float> xRow(x.begin() + r * in, x.begin() + (r + 1) * in);
      const auto alone = runLinear(xRow, w, &bias, 1, in, out);
      const std::vector<float> batchedRow(batched.begin() + r * out,
                                          batched.begin() + (r + 1) * out);
      EXPECT_TRUE(testing::bitwiseEqual(alone, batchedRow)) << "row " << r;
    }
  }
}

TEST(LinearTest, ZeroRowsWritesNothing) {
  const auto w = makeWeights(randomFloats(16, 3), WeightType::kF32);
  std::vector<float> y(4, 5.0f);
  LinearArgs args{nullptr, w.data(), w.type, nullptr, y.data(), 0, 4, 4};
  linear(args);
  EXPECT_EQ(y, std::vector<float>(4, 5.0f));
}

} // namespace
} // namespace kiln::kernels::cpu
