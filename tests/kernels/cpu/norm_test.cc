#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

// Each test at every instruction-set level of this CPU (16 lanes from avx512 up, 8 at avx2,
// kernels/cpu/norm_rows.h; the baseline's loops below that), the detected one put back after.
class RmsNormTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

constexpr int32_t kRowCounts[] = {1, 3, 17, 64};
// Below, at and past one and two 16-lane chunks, with partial last chunks.
constexpr int32_t kHiddens[] = {8, 16, 20, 32, 47, 64, 96, 130};

// Relative tolerance 1e-5 (fp32 sum of squares and rsqrt), floor 1e-6 for near-zero outputs.
void expectRmsNormOfRows(const std::vector<float> &x, const std::vector<float> &weight,
                         const std::vector<float> &y, int32_t rows, int32_t hidden, float eps) {
  for (int32_t r = 0; r < rows; ++r) {
    double sumSquares = 0.0;
    for (int32_t i = 0; i < hidden; ++i)
      sumSquares += static_cast<double>(x[r * hidden + i]) * x[r * hidden + i];
    const double inverse = 1.0 / std::sqrt(sumSquares / hidden + eps);
    for (int32_t i = 0; i < hidden; ++i) {
      const double expected = x[r * hidden + i] * inverse * weight[i];
      ASSERT_NEAR(y[r * hidden + i], expected, 1e-5 * std::fabs(expected) + 1e-6)
          << "row " << r << " dim " << i;
    }
  }
}

TEST_P(RmsNormTest, MatchesDoubleReferenceOverShapeGrid) {
  uint32_t seed = 100;
  for (int32_t rows : kRowCounts)
    for (int32_t hidden : kHiddens) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " hidden=" << hidden);
      const auto x = randomFloats(static_cast<size_t>(rows) * hidden, ++seed, -3.0f, 3.0f);
      const auto weight = randomFloats(hidden, ++seed, 0.5f, 1.5f);
      std::vector<float> y(x.size());
      const float eps = 1e-5f;
      rmsNorm({x.data(), weight.data(), y.data(), rows, hidden, eps});
      expectRmsNormOfRows(x, weight, y, rows, hidden, eps);
    }
}

// eps dominates a zero row: output must be exactly zero, not NaN.
TEST_P(RmsNormTest, ZeroRowGivesZeros) {
  const std::vector<float> x(64, 0.0f), weight(64, 1.0f);
  std::vector<float> y(64, 9.0f);
  rmsNorm({x.data(), weight.data(), y.data(), 1, 64, 1e-6f});
  EXPECT_EQ(y, std::vector<float>(64, 0.0f));
}

TEST_P(RmsNormTest, AddUpdatesResidualExactlyAndNormalisesIt) {
  uint32_t seed = 200;
  for (int32_t rows : kRowCounts)
    for (int32_t hidden : kHiddens) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " hidden=" << hidden);
      const auto x = randomFloats(static_cast<size_t>(rows) * hidden, ++seed, -2.0f, 2.0f);
      const auto residualIn = randomFloats(x.size(), ++seed, -2.0f, 2.0f);
      const auto weight = randomFloats(hidden, ++seed, 0.5f, 1.5f);
      auto residual = residualIn;
      std::vector<float> y(x.size());
      addRmsNorm({x.data(), residual.data(), weight.data(), y.data(), rows, hidden, 1e-6f});
      std::vector<float> expectedResidual(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        expectedResidual[i] = residualIn[i] + x[i]; // one fp32 add: must match bit for bit
      ASSERT_TRUE(testing::bitwiseEqual(residual, expectedResidual));
      expectRmsNormOfRows(expectedResidual, weight, y, rows, hidden, 1e-6f);
    }
}

// LayerNorm (encoders) against a double-precision reference, with a large mean so a one-pass
// variance would lose digits; in place too.
TEST(LayerNormTest, MatchesDoubleReference) {
  uint32_t seed = 300;
  for (int32_t rows : {1, 3, 17})
    for (int32_t hidden : {1, 64, 384, 1000}) {
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " hidden=" << hidden);
      auto x = randomFloats(static_cast<size_t>(rows) * hidden, ++seed, 97.0f, 103.0f);
      const auto weight = randomFloats(hidden, ++seed, 0.5f, 1.5f);
      const auto bias = randomFloats(hidden, ++seed, -1.0f, 1.0f);
      std::vector<float> y(x.size());
      layerNorm({x.data(), weight.data(), bias.data(), y.data(), rows, hidden, 1e-12f});
      for (int32_t r = 0; r < rows; ++r) {
        const float *row = x.data() + size_t(r) * hidden;
        double mean = 0, var = 0;
        for (int32_t i = 0; i < hidden; ++i)
          mean += row[i];
        mean /= hidden;
        for (int32_t i = 0; i < hidden; ++i)
          var += (row[i] - mean) * (row[i] - mean);
        var /= hidden;
        for (int32_t i = 0; i < hidden; ++i) {
          const double expected = (row[i] - mean) / std::sqrt(var + 1e-12) * weight[i] + bias[i];
          ASSERT_NEAR(y[size_t(r) * hidden + i], expected, 2e-4) << "row " << r << " i " << i;
        }
      }
      std::vector<float> inPlace = x;
      layerNorm({inPlace.data(), weight.data(), bias.data(), inPlace.data(), rows, hidden, 1e-12f});
      EXPECT_TRUE(testing::bitwiseEqual(inPlace, y));
    }
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, RmsNormTest, ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

} // namespace
} // namespace kiln::kernels::cpu
