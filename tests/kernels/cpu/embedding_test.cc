#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::makeWeights;
using testing::randomFloats;

// Embedding is a copy plus an exact widening: outputs must equal the stored values bit for bit.
TEST(EmbeddingTest, CopiesRowsExactlyForEveryWeightType) {
  const int32_t vocab = 50;
  uint32_t seed = 300;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (int32_t hidden : {8, 64, 96, 130}) {
      SCOPED_TRACE(::testing::Message() << testing::weightTypeName(type) << " hidden=" << hidden);
      const auto table =
          makeWeights(randomFloats(static_cast<size_t>(vocab) * hidden, ++seed, -4, 4), type);
      const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48};
      const int32_t n = static_cast<int32_t>(ids.size());
      std::vector<float> out(static_cast<size_t>(n) * hidden, -1.0f);
      embedding({ids.data(), n, table.data(), type, vocab, hidden, out.data()});
      for (int32_t t = 0; t < n; ++t) {
        const std::vector<float> expected(table.values.begin() + ids[t] * hidden,
                                          table.values.begin() + (ids[t] + 1) * hidden);
        const std::vector<float> got(out.begin() + t * hidden, out.begin() + (t + 1) * hidden);
        EXPECT_TRUE(testing::bitwiseEqual(got, expected)) << "token " << t << " id " << ids[t];
      }
    }
}

} // namespace
} // namespace kiln::kernels::cpu
