#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"
#include "runtime/base/quant_layout.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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

// Gemma: each row times the scale in fp32, rounded once to the output type; ids outside the shard
// stay zero rows.
TEST(EmbeddingTest, ScaledRowsAreTheProductRoundedOnce) {
  const int32_t vocab = 20, hidden = 48;
  const float scale = bf16ToF32(f32ToBf16(std::sqrt(2304.0f))); // Gemma 2 2B: 48, exact
  for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
    SCOPED_TRACE(testing::weightTypeName(type));
    const auto table =
        makeWeights(randomFloats(static_cast<size_t>(vocab) * hidden, 9, -2, 2), type);
    const std::vector<int32_t> ids = {3, 19, 0, 25};
    const int32_t n = static_cast<int32_t>(ids.size());
    std::vector<float> out(static_cast<size_t>(n) * hidden, -1.0f);
    std::vector<uint16_t> halves(out.size());
    EmbeddingArgs args{ids.data(), n, table.data(), type, vocab, hidden, out.data()};
    args.scale = scale;
    embedding(args);
    args.out = halves.data();
    args.outType = ElemType::kBF16;
    embedding(args);
    for (int32_t t = 0; t < n; ++t)
      for (int32_t i = 0; i < hidden; ++i) {
        const float expected = ids[t] < vocab ? table.values[ids[t] * hidden + i] * scale : 0.0f;
        ASSERT_EQ(out[t * hidden + i], expected) << "token " << t << " dim " << i;
        ASSERT_EQ(halves[t * hidden + i], f32ToBf16(expected)) << "token " << t << " dim " << i;
      }
  }
}

// A vocab shard holds ids [vocabStart, vocabStart + vocabSize): those read their row exactly,
// every other id (below, above, or far outside, where id - vocabStart would wrap in 32 bits)
// gives a zero row, so summing the shards' outputs reproduces the whole-table lookup.
TEST(EmbeddingTest, VocabShardReadsItsIdsAndZerosTheRest) {
  const int32_t vocab = 10, hidden = 24, shard = 4;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16}) {
    SCOPED_TRACE(testing::weightTypeName(type));
    const auto whole =
        makeWeights(randomFloats(static_cast<size_t>(vocab) * hidden, 7, -4, 4), type);
    const std::vector<int32_t> ids = {0, 3, 4, 7, 8, 9, 5, 2147483647};
    const int32_t n = static_cast<int32_t>(ids.size());
    std::vector<float> sum(static_cast<size_t>(n) * hidden, 0.0f);
    for (int32_t start = 0; start < vocab; start += shard) {
      // The last shard is zero-padded past the vocab, as the compiler stores it.
      std::vector<float> rows(static_cast<size_t>(shard) * hidden, 0.0f);
      for (int32_t r = 0; r < shard && start + r < vocab; ++r)
        std::copy_n(whole.values.begin() + (start + r) * hidden, hidden, rows.begin() + r * hidden);
      const auto table = makeWeights(rows, type);
      std::vector<float> out(static_cast<size_t>(n) * hidden, -1.0f);
      embedding({ids.data(), n, table.data(), type, shard, hidden, out.data(), start});
      for (int32_t t = 0; t < n; ++t) {
        const bool mine = ids[t] >= start && ids[t] < start + shard;
        for (int32_t j = 0; j < hidden; ++j) {
          const float expected = mine ? table.values[(ids[t] - start) * hidden + j] : 0.0f;
          ASSERT_EQ(out[t * hidden + j], expected) << "shard " << start << " id " << ids[t];
          sum[t * hidden + j] += out[t * hidden + j];
        }
      }
    }
    for (int32_t t = 0; t + 1 < n; ++t) // the last id is past the vocab: all zeros
      for (int32_t j = 0; j < hidden; ++j)
        ASSERT_EQ(sum[t * hidden + j], whole.values[ids[t] * hidden + j]) << "id " << ids[t];
  }
}

// The output bits of element i: fp32 bits, or the stored half widened to 32 bits.
uint32_t outputBits(const std::vector<uint32_t> &out, ElemType type, size_t i) {
  if (type == ElemType::kF32)
    return out[i];
  uint16_t half;
  std::memcpy(&half, reinterpret_cast<const uint16_t *>(out.data()) + i, 2);
  return half;
}

uint32_t expectedBits(float value, ElemType type) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return type == ElemType::kF32   ? bits
         : type == ElemType::kF16 ? f32ToF16(value)
                                  : f32ToBf16(value);
}

// Each row dequantized to its exact fp32 values, then rounded once to outType: bit for bit.
// Groups of 32 and per channel (= hidden); weightType is not read for a quantized table.
TEST(EmbeddingTest, QuantizedRowsAreDequantizedThenRoundedOnce) {
  const int32_t vocab = 20;
  const std::vector<int32_t> ids = {0, 19, 7, 7, 3, 12};
  const int32_t n = static_cast<int32_t>(ids.size());
  uint32_t seed = 900;
  for (QuantFormat format : {QuantFormat::kQ8, QuantFormat::kQ4, QuantFormat::kQ4Min,
                             QuantFormat::kQ4Zero, QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32})
    for (int32_t hidden : {64, 96})
      for (int32_t group : {32, hidden})
        for (ElemType outType : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
          SCOPED_TRACE(::testing::Message()
                       << quantFormatName(format) << " hidden=" << hidden << " group=" << group
                       << " out=" << testing::weightTypeName(outType));
          const testing::QuantMatrixBytes table =
              testing::randomQuantized(format, vocab, hidden, group, ++seed);
          std::vector<uint32_t> out(size_t(n) * hidden, 0xFFFFFFFFu);
          EmbeddingArgs args{ids.data(), n,      table.bytes.data(), WeightType::kBF16,
                             vocab,      hidden, out.data()};
          args.outType = outType;
          args.quant = table.quant;
          embedding(args);
          for (int32_t t = 0; t < n; ++t)
            for (int32_t j = 0; j < hidden; ++j)
              ASSERT_EQ(outputBits(out, outType, size_t(t) * hidden + j),
                        expectedBits(table.values[ids[t] * hidden + j], outType))
                  << "token " << t << " column " << j;
        }
}

// A shard [vocabStart, vocabStart + vocabSize) of a quantized table: its ids read their rows,
// every other id (below, above, far outside) gives zeros.
TEST(EmbeddingTest, QuantizedShardReadsItsIdsAndZerosTheRest) {
  const int32_t shard = 4, hidden = 64, start = 10;
  const std::vector<int32_t> ids = {9, 10, 13, 14, -1, 2147483647, 12, 0};
  const int32_t n = static_cast<int32_t>(ids.size());
  for (QuantFormat format : {QuantFormat::kQ8, QuantFormat::kQ4, QuantFormat::kQ4Min,
                             QuantFormat::kQ4Zero, QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32})
    for (ElemType outType : {ElemType::kF32, ElemType::kBF16}) {
      SCOPED_TRACE(::testing::Message()
                   << quantFormatName(format) << " out=" << testing::weightTypeName(outType));
      const testing::QuantMatrixBytes table =
          testing::randomQuantized(format, shard, hidden, 32, 77);
      std::vector<uint32_t> out(size_t(n) * hidden, 0xFFFFFFFFu);
      EmbeddingArgs args{ids.data(), n,      table.bytes.data(), WeightType::kF32,
                         shard,      hidden, out.data(),         start};
      args.outType = outType;
      args.quant = table.quant;
      embedding(args);
      for (int32_t t = 0; t < n; ++t) {
        const bool mine = ids[t] >= start && ids[t] < start + shard;
        for (int32_t j = 0; j < hidden; ++j)
          ASSERT_EQ(outputBits(out, outType, size_t(t) * hidden + j),
                    mine ? expectedBits(table.values[(ids[t] - start) * hidden + j], outType) : 0u)
              << "id " << ids[t] << " column " << j;
      }
    }
}

} // namespace
} // namespace kiln::kernels::cpu
