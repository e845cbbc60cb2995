// Every cpu kernel with fp16/bf16 activations (and KV cache) against its own fp32 run on the same,
// half-representable inputs. The kernels widen half inputs exactly, compute with the fp32 code
// path and round each output element once, so the half result must be the round-to-nearest-even
// of the fp32 result, bit for bit. That implies the documented error bound: |half - fp32| <=
// |fp32| * 2^-8 for bf16 (8 significant bits: half an ulp is 2^-8 relative at worst) and
// |fp32| * 2^-11 for fp16, plus half the smallest fp16 subnormal (2^-25) where fp16 underflows;
// the fp32 error itself is the same on both sides, so it adds nothing. Both are asserted.
// One exception: at the amx level, attention over bf16 queries and a bf16 cache runs on the tiles
// (kernels/cpu/attention_amx.cc), which round the softmax weights to bf16; it is checked against
// the fp32 run within that rounding, and for its own batch invariance.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "runtime/base/fp8.h"
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

using testing::makeWeights;
using testing::randomFloats;
using testing::TypedWeights;

constexpr ElemType kHalfTypes[] = {ElemType::kBF16, ElemType::kF16};

uint16_t roundTo(float value, ElemType type) {
  return type == ElemType::kBF16 ? f32ToBf16(value) : f32ToF16(value);
}
float widen(uint16_t bits, ElemType type) {
  return type == ElemType::kBF16 ? bf16ToF32(bits) : f16ToF32(bits);
}

// Random values rounded to `type`: `values` hold exactly what `halves` store.
TypedWeights halfInputs(size_t n, uint32_t seed, ElemType type, float lo = -1.0f, float hi = 1.0f) {
  return makeWeights(randomFloats(n, seed, lo, hi), type);
}

// A kernel output of either type, read back as bits (half) or floats (fp32).
struct Output {
  ElemType type;
  std::vector<uint16_t> halves;
  std::vector<float> floats;
  Output(ElemType t, size_t n, float fill = -333.0f)
      : type(t), halves(t == ElemType::kF32 ? 0 : n,
                        roundTo(fill, t == ElemType::kF16 ? t : ElemType::kBF16)),
        floats(t == ElemType::kF32 ? n : 0, fill) {}
  void *data() {
    return type == ElemType::kF32 ? static_cast<void *>(floats.data())
                                  : static_cast<void *>(halves.data());
  }
};

// `got` (stored as `type`) is the rounding of the fp32 result `expected`, bit for bit, and within
// the bound in the file comment.
void expectRoundedOf(const Output &got, const std::vector<float> &expected, const char *what) {
  if (got.type == ElemType::kF32) {
    ASSERT_TRUE(testing::bitwiseEqual(got.floats, expected)) << what;
    return;
  }
  ASSERT_EQ(got.halves.size(), expected.size()) << what;
  const double relative = got.type == ElemType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double floor = got.type == ElemType::kBF16 ? 0.0 : std::ldexp(1.0, -25);
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(got.halves[i], roundTo(expected[i], got.type))
        << what << " element " << i << ": fp32 " << expected[i];
    const double error = std::fabs(double(widen(got.halves[i], got.type)) - expected[i]);
    ASSERT_LE(error, std::fabs(expected[i]) * relative + floor) << what << " element " << i;
  }
}

// The fp32 run on the exact values of half inputs: the reference every half run must round to.
std::vector<float> linearF32(const std::vector<float> &x, const TypedWeights &w, int32_t rows,
                             int32_t in, int32_t out, const std::vector<float> *bias) {
  std::vector<float> y(static_cast<size_t>(rows) * out);
  linear({x.data(), w.data(), w.type, bias ? bias->data() : nullptr, y.data(), rows, in, out});
  return y;
}

TEST(HalfKernelsTest, LinearRoundsTheFp32ResultForEveryTypeMix) {
  const ElemType weightTypes[] = {ElemType::kF32, ElemType::kF16, ElemType::kBF16};
  // 1 and 3 rows stream the weights, 9 and 65 block over k; 1100 crosses the 1024-column chunks
  // half x is widened in and 300 the 256-wide k block.
  uint32_t seed = 9000;
  for (ElemType xType : kHalfTypes)
    for (ElemType wType : weightTypes)
      for (int32_t rows : {1, 3, 9, 65})
        for (int32_t in : {8, 300, 1100})
          for (int32_t out : {7, 33}) {
            SCOPED_TRACE(::testing::Message() << "x " << testing::weightTypeName(xType) << " w "
                                              << testing::weightTypeName(wType) << " rows=" << rows
                                              << " in=" << in << " out=" << out);
            const auto x = halfInputs(static_cast<size_t>(rows) * in, ++seed, xType);
            const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, ++seed), wType);
            const auto bias = randomFloats(out, ++seed);
            const std::vector<float> *b = seed % 2 ? &bias : nullptr;
            const auto expected = linearF32(x.values, w, rows, in, out, b);
            for (ElemType outType : {xType, ElemType::kF32}) { // hidden states; fp32 logits
              Output y(outType, expected.size());
              linear({x.data(), w.data(), w.type, b ? b->data() : nullptr, y.data(), rows, in, out,
                      xType, outType});
              expectRoundedOf(y, expected, testing::weightTypeName(outType));
            }
          }
}

// Outputs that are fp32 subnormals round to bf16 as f32ToBf16 rounds them (the bf16 conversion
// instruction of the amx stores would flush them to zero; those rows take the exact path): x of
// zeros, so each output is its bias, some of them subnormal. 20 rows, 64 outputs and packed
// weights run amx's two-group stores; every level must agree.
TEST(HalfKernelsTest, LinearKeepsSubnormalBf16Outputs) {
  const int32_t rows = 20, in = 64, out = 64;
  const std::vector<float> x(size_t(rows) * in, 0.0f);
  const auto w = makeWeights(randomFloats(size_t(out) * in, 31), WeightType::kBF16);
  std::vector<float> bias = randomFloats(out, 32);
  for (int32_t o = 0; o < out; o += 3)
    bias[o] = std::ldexp(bias[o], -130); // subnormal: |b| < 2^-126
  const auto xHalves = makeWeights(x, WeightType::kBF16);
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    // Packed weights where the level packs them, as the cpu device prepares a Linear.
    std::vector<uint32_t> packed((linearPackedWeightBytes(w.type, out, in) + 3) / 4);
    if (!packed.empty())
      packLinearWeights(w.data(), w.type, out, in, packed.data());
    Output y(ElemType::kBF16, size_t(rows) * out);
    LinearArgs args{xHalves.data(), w.data(), w.type, bias.data(),     y.data(),
                    rows,           in,       out,    ElemType::kBF16, ElemType::kBF16};
    args.packedWeight = packed.empty() ? nullptr : packed.data();
    linear(args);
    setCpuIsa(detectedCpuIsa());
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t o = 0; o < out; ++o)
        ASSERT_EQ(y.halves[size_t(r) * out + o], f32ToBf16(bias[o]))
            << cpuIsaName(isa) << " row " << r << " out " << o << " bias " << bias[o];
  }
}

// A half row is widened identically whether it is decoded alone (streaming path) or sits in a
// large prefill tile (k-blocked path), so its outputs are bit-identical either way; with fp32
// weights x is widened in column order, with bf16 ones in pair order.
TEST(HalfKernelsTest, LinearHalfRowsAreBitIdenticalAcrossBatchSizes) {
  const int32_t in = 1100, out = 37, rows = 300;
  for (ElemType weightType : {ElemType::kF32, ElemType::kBF16})
    for (ElemType type : kHalfTypes) {
      SCOPED_TRACE(testing::weightTypeName(type) + std::string(" x, weights ") +
                   testing::weightTypeName(weightType));
      const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, 21), weightType);
      const auto x = halfInputs(static_cast<size_t>(rows) * in, 22, type);
      Output batched(type, static_cast<size_t>(rows) * out);
      linear({x.data(), w.data(), w.type, nullptr, batched.data(), rows, in, out, type, type});
      for (int32_t r : {0, 5, 63, 64, 69, 255, 256, 299}) {
        Output alone(type, out);
        linear({x.halves.data() + r * in, w.data(), w.type, nullptr, alone.data(), 1, in, out, type,
                type});
        EXPECT_TRUE(
            std::equal(alone.halves.begin(), alone.halves.end(), batched.halves.begin() + r * out))
            << "row " << r;
      }
    }
}

TEST(HalfKernelsTest, RmsNormRoundsTheFp32Result) {
  for (CpuIsa isa : availableCpuIsas()) { // 16 lanes from avx512 up, 8 at avx2 (norm_rows.h)
    ASSERT_TRUE(setCpuIsa(isa));
    SCOPED_TRACE(cpuIsaName(isa));
    uint32_t seed = 9100;
    for (ElemType type : kHalfTypes)
      for (int32_t rows : {1, 17, 300}) // 300 x 96 rows runs in parallel
        for (int32_t hidden : {8, 96, 130}) {
          SCOPED_TRACE(::testing::Message() << testing::weightTypeName(type) << " rows=" << rows
                                            << " hidden=" << hidden);
          const auto x = halfInputs(static_cast<size_t>(rows) * hidden, ++seed, type, -3.0f, 3.0f);
          const auto weight = randomFloats(hidden, ++seed, 0.5f, 1.5f);
          std::vector<float> expected(x.values.size());
          rmsNorm({x.values.data(), weight.data(), expected.data(), rows, hidden, 1e-5f});
          Output y(type, expected.size());
          rmsNorm({x.data(), weight.data(), y.data(), rows, hidden, 1e-5f, type});
          expectRoundedOf(y, expected, "y");
        }
  }
  setCpuIsa(detectedCpuIsa());
}

// plan.fbs: the residual is rounded once when stored, and y normalises the residual as stored.
TEST(HalfKernelsTest, AddRmsNormRoundsTheResidualThenNormalisesIt) {
  for (CpuIsa isa : availableCpuIsas()) { // 16 lanes from avx512 up, 8 at avx2 (norm_rows.h)
    ASSERT_TRUE(setCpuIsa(isa));
    SCOPED_TRACE(cpuIsaName(isa));
    uint32_t seed = 9200;
    for (ElemType type : kHalfTypes)
      for (int32_t rows : {1, 17, 300})
        for (int32_t hidden : {8, 96, 130}) {
          SCOPED_TRACE(::testing::Message() << testing::weightTypeName(type) << " rows=" << rows
                                            << " hidden=" << hidden);
          const size_t n = static_cast<size_t>(rows) * hidden;
          const auto x = halfInputs(n, ++seed, type, -2.0f, 2.0f);
          const auto residualIn = halfInputs(n, ++seed, type, -2.0f, 2.0f);
          const auto weight = randomFloats(hidden, ++seed, 0.5f, 1.5f);
          std::vector<float> sum = residualIn.values, unused(n);
          addRmsNorm(
              {x.values.data(), sum.data(), weight.data(), unused.data(), rows, hidden, 1e-6f});
          std::vector<float> stored(n), expectedY(n);
          for (size_t i = 0; i < n; ++i)
            stored[i] = widen(roundTo(sum[i], type), type);
          rmsNorm({stored.data(), weight.data(), expectedY.data(), rows, hidden, 1e-6f});

          Output residual(type, n), y(type, n);
          residual.halves = residualIn.halves;
          addRmsNorm(
              {x.data(), residual.data(), weight.data(), y.data(), rows, hidden, 1e-6f, type});
          expectRoundedOf(residual, sum, "residual");
          expectRoundedOf(y, expectedY, "y");
        }
  }
  setCpuIsa(detectedCpuIsa());
}

TEST(HalfKernelsTest, SiluMulAddAndGatherRoundTheFp32Result) {
  uint32_t seed = 9300;
  for (ElemType type : kHalfTypes) {
    SCOPED_TRACE(testing::weightTypeName(type));
    for (int32_t rows : {1, 300}) {
      const int32_t inter = 130;
      const auto gu = halfInputs(static_cast<size_t>(rows) * 2 * inter, ++seed, type, -8.0f, 8.0f);
      std::vector<float> expected(static_cast<size_t>(rows) * inter);
      siluMul({gu.values.data(), expected.data(), rows, inter});
      Output y(type, expected.size());
      siluMul({gu.data(), y.data(), rows, inter, type});
      expectRoundedOf(y, expected, "silu_mul");
    }
    for (int64_t count : {int64_t{1}, int64_t{1025}, int64_t{100000}}) { // runs of 1024
      const auto a = halfInputs(count, ++seed, type), b = halfInputs(count, ++seed, type);
      std::vector<float> expected(count);
      add({a.values.data(), b.values.data(), expected.data(), count});
      Output y(type, count);
      add({a.data(), b.data(), y.data(), count, type});
      expectRoundedOf(y, expected, "add");
    }
    const int32_t width = 130;
    const auto x = halfInputs(6 * width, ++seed, type);
    const std::vector<int32_t> indices = {5, 0, 0, 3};
    Output y(type, indices.size() * width);
    gatherRows({x.data(), indices.data(), y.data(), 4, width, type});
    for (size_t i = 0; i < indices.size(); ++i)
      ASSERT_TRUE(std::equal(y.halves.begin() + i * width, y.halves.begin() + (i + 1) * width,
                             x.halves.begin() + indices[i] * width))
          << "row " << i;
  }
}

// Same-type rows are copied bit for bit; another table type is rounded once from its fp32 value.
TEST(HalfKernelsTest, EmbeddingStoresRowsInTheOutputType) {
  const int32_t vocab = 20, hidden = 96;
  const std::vector<int32_t> ids = {0, 19, 7, 7, 25, -1};
  const int32_t n = static_cast<int32_t>(ids.size());
  for (ElemType tableType : {ElemType::kF32, ElemType::kF16, ElemType::kBF16})
    for (ElemType outType : kHalfTypes) {
      SCOPED_TRACE(::testing::Message() << "table " << testing::weightTypeName(tableType) << " out "
                                        << testing::weightTypeName(outType));
      const auto table = makeWeights(randomFloats(size_t(vocab) * hidden, 31, -4, 4), tableType);
      std::vector<float> expected(size_t(n) * hidden, 0.0f);
      for (int32_t t = 0; t < n; ++t)
        if (ids[t] >= 0 && ids[t] < vocab)
          std::copy_n(table.values.begin() + ids[t] * hidden, hidden,
                      expected.begin() + t * hidden);
      Output y(outType, expected.size());
      embedding({ids.data(), n, table.data(), tableType, vocab, hidden, y.data(), 0, outType});
      expectRoundedOf(y, expected, "embedding");
    }
}

struct RopeCase {
  ElemType type, kvType;
};

TEST(HalfKernelsTest, RopeKvWriteRoundsRotatedQAndKAndStoresV) {
  const RopeCase cases[] = {{ElemType::kBF16, ElemType::kBF16},
                            {ElemType::kF16, ElemType::kF16},
                            {ElemType::kF32, ElemType::kBF16},
                            {ElemType::kBF16, ElemType::kF16}};
  const int32_t heads = 4, kvHeads = 2, headDim = 32, blockSize = 4, numTokens = 9;
  const int32_t numBlocks = 6, rotaryDim = 24; // partial rotary: the tail passes through
  const int64_t qkvWidth = int64_t(heads + 2 * kvHeads) * headDim;
  const size_t cacheSize = size_t(numBlocks) * kvHeads * blockSize * headDim;
  std::vector<int32_t> positions(numTokens), slots(numBlocks * blockSize);
  std::mt19937 rng(5);
  for (int32_t &p : positions)
    p = std::uniform_int_distribution<int32_t>(0, 4000)(rng);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(numTokens);
  slots[2] = -1; // padding token
  std::vector<float> invFreq(rotaryDim / 2);
  for (int32_t i = 0; i < rotaryDim / 2; ++i)
    invFreq[i] = 1.0f / std::pow(10000.0f, float(2 * i) / rotaryDim);
  for (const RopeCase &c : cases) {
    SCOPED_TRACE(::testing::Message() << "act " << testing::weightTypeName(c.type) << " kv "
                                      << testing::weightTypeName(c.kvType));
    const auto qkv = makeWeights(randomFloats(numTokens * qkvWidth, 77), c.type);
    std::vector<float> q32(size_t(numTokens) * heads * headDim), k32(cacheSize, 0.0f),
        v32(cacheSize, 0.0f);
    ropeKvWrite({qkv.values.data(), positions.data(), slots.data(), invFreq.data(), q32.data(),
                 k32.data(), v32.data(), numTokens, heads, kvHeads, headDim, rotaryDim, blockSize});
    Output q(c.type, q32.size()), kCache(c.kvType, cacheSize, 0.0f),
        vCache(c.kvType, cacheSize, 0.0f);
    ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(),
                 kCache.data(), vCache.data(), numTokens, heads, kvHeads, headDim, rotaryDim,
                 blockSize, c.type, c.kvType});
    expectRoundedOf(q, q32, "q");
    // Unwritten slots hold the fill (0 in both runs), so whole caches compare.
    expectRoundedOf(kCache, k32, "k cache");
    expectRoundedOf(vCache, v32, "v cache");
  }
}

// An fp8 cache with a layer's calibrated scales (plan.fbs KvCacheSpec.k_scales / v_scales): the
// cache holds the fp8 rounding of k / kScale and v / vScale, each quotient taken in fp32 from the
// fp32 run's k and v, at every level.
TEST(HalfKernelsTest, RopeKvWriteDividesByAnFp8CachesScales) {
  const int32_t heads = 4, kvHeads = 2, headDim = 32, blockSize = 4, numTokens = 7;
  const int32_t numBlocks = 4, rotaryDim = 32;
  const float kScale = 0.25f, vScale = 3.0f;
  const int64_t qkvWidth = int64_t(heads + 2 * kvHeads) * headDim;
  const size_t cacheSize = size_t(numBlocks) * kvHeads * blockSize * headDim;
  std::vector<int32_t> positions = {0, 1, 2, 9, 40, 41, 300};
  std::vector<int32_t> slots = {3, 0, 15, -1, 7, 8, 12}; // a padding token
  std::vector<float> invFreq(rotaryDim / 2);
  for (int32_t i = 0; i < rotaryDim / 2; ++i)
    invFreq[i] = 1.0f / std::pow(10000.0f, float(2 * i) / rotaryDim);
  const std::vector<float> qkv = randomFloats(numTokens * qkvWidth, 83, -4.0f, 4.0f);
  for (CpuIsa isa : availableCpuIsas()) { // each level's own rotation (its cosines' bits)
    SCOPED_TRACE(cpuIsaName(isa));
    ASSERT_TRUE(setCpuIsa(isa));
    std::vector<float> q32(size_t(numTokens) * heads * headDim), k32(cacheSize, 0.0f),
        v32(cacheSize, 0.0f);
    ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q32.data(), k32.data(),
                 v32.data(), numTokens, heads, kvHeads, headDim, rotaryDim, blockSize});
    std::vector<float> q(q32.size());
    std::vector<uint8_t> kCache(cacheSize, 0), vCache(cacheSize, 0);
    RopeKvWriteArgs args{qkv.data(), positions.data(), slots.data(),     invFreq.data(),
                         q.data(),   kCache.data(),    vCache.data(),    numTokens,
                         heads,      kvHeads,          headDim,          rotaryDim,
                         blockSize,  ElemType::kF32,   ElemType::kF8E4M3};
    args.kScale = kScale;
    args.vScale = vScale;
    ropeKvWrite(args);
    EXPECT_TRUE(testing::bitwiseEqual(q, q32)); // q is not scaled
    size_t scaledAway = 0; // elements whose unscaled rounding differs: the scales mattered
    for (size_t i = 0; i < cacheSize; ++i) {
      ASSERT_EQ(kCache[i], f32ToF8E4M3(k32[i] / kScale)) << "k " << i;
      ASSERT_EQ(vCache[i], f32ToF8E4M3(v32[i] / vScale)) << "v " << i;
      scaledAway += kCache[i] != f32ToF8E4M3(k32[i]);
    }
    EXPECT_GT(scaledAway, cacheSize / 4);
  }
  setCpuIsa(detectedCpuIsa());
}

// A paged cache filled with half-representable K/V and a batch mixing a chunked prefill, a decode
// and a fresh prefill, through shuffled block tables.
struct HalfAttentionBatch {
  int32_t heads = 8, kvHeads = 2, headDim = 32, blockSize = 16, slidingWindow = 0;
  std::vector<int32_t> contextLens = {50, 20, 37}, newTokens = {5, 1, 37};
  std::vector<int32_t> positions, queryStartLoc = {0}, blockTables;
  int32_t maxBlocksPerSeq = 4, numBlocks = 12, numTokens = 0;
  TypedWeights q, k, v;

  HalfAttentionBatch(ElemType type, ElemType kvType, uint32_t seed, int32_t numHeads = 8,
                     int32_t numKvHeads = 2, int32_t dim = 32, int32_t window = 0)
      : heads(numHeads), kvHeads(numKvHeads), headDim(dim), slidingWindow(window) {
    std::vector<int32_t> ids(numBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    blockTables.assign(contextLens.size() * maxBlocksPerSeq, -1);
    size_t next = 0;
    for (size_t s = 0; s < contextLens.size(); ++s) {
      for (int32_t b = 0; b * blockSize < contextLens[s]; ++b)
        blockTables[s * maxBlocksPerSeq + b] = ids[next++];
      for (int32_t p = contextLens[s] - newTokens[s]; p < contextLens[s]; ++p)
        positions.push_back(p);
      numTokens += newTokens[s];
      queryStartLoc.push_back(numTokens);
    }
    const size_t cacheSize = size_t(numBlocks) * kvHeads * blockSize * headDim;
    q = makeWeights(randomFloats(size_t(numTokens) * heads * headDim, seed + 1, -2, 2), type);
    k = makeWeights(randomFloats(cacheSize, seed + 2), kvType);
    v = makeWeights(randomFloats(cacheSize, seed + 3), kvType);
  }

  AttentionArgs args(const void *query, const void *keys, const void *values, void *out,
                     ElemType type, ElemType kvType) const {
    return {query,
            positions.data(),
            queryStartLoc.data(),
            contextLens.data(),
            blockTables.data(),
            maxBlocksPerSeq,
            keys,
            values,
            out,
            int32_t(contextLens.size()),
            numTokens,
            heads,
            kvHeads,
            headDim,
            blockSize,
            1.0f / std::sqrt(float(headDim)),
            type,
            kvType,
            slidingWindow};
  }
};

// Attention over an fp8 cache with scales reads each element as fp8 widened times its scale: the
// bits of fp32 attention over an fp32 cache holding those products, at every level.
TEST(HalfKernelsTest, AttentionOverAScaledFp8CacheMultipliesTheWidenedValues) {
  const float kScale = 0.5f, vScale = 5.0f;
  for (CpuIsa isa : availableCpuIsas()) {
    SCOPED_TRACE(cpuIsaName(isa));
    ASSERT_TRUE(setCpuIsa(isa));
    const HalfAttentionBatch b(ElemType::kF32, ElemType::kF32, 9900);
    std::vector<uint8_t> k8(b.k.values.size()), v8(b.v.values.size());
    std::vector<float> kScaled(k8.size()), vScaled(v8.size());
    for (size_t i = 0; i < k8.size(); ++i) {
      k8[i] = f32ToF8E4M3(b.k.values[i] * 3.0f);
      v8[i] = f32ToF8E4M3(b.v.values[i] * 0.3f);
      kScaled[i] = f8e4m3ToF32(k8[i]) * kScale;
      vScaled[i] = f8e4m3ToF32(v8[i]) * vScale;
    }
    std::vector<float> expected(b.q.values.size());
    attention(b.args(b.q.values.data(), kScaled.data(), vScaled.data(), expected.data(),
                     ElemType::kF32, ElemType::kF32));
    std::vector<float> out(expected.size());
    AttentionArgs args = b.args(b.q.values.data(), k8.data(), v8.data(), out.data(), ElemType::kF32,
                                ElemType::kF8E4M3);
    args.kScale = kScale;
    args.vScale = vScale;
    attention(args);
    EXPECT_TRUE(testing::bitwiseEqual(out, expected));
    // Without the scales the output is another one.
    std::vector<float> unscaled(expected.size());
    attention(b.args(b.q.values.data(), k8.data(), v8.data(), unscaled.data(), ElemType::kF32,
                     ElemType::kF8E4M3));
    EXPECT_GT(std::fabs(unscaled[0] - expected[0]), 0.01f);
  }
  setCpuIsa(detectedCpuIsa());
}

TEST(HalfKernelsTest, AttentionOverAHalfCacheRoundsTheFp32Result) {
  const RopeCase cases[] = {{ElemType::kBF16, ElemType::kBF16},
                            {ElemType::kF16, ElemType::kF16},
                            {ElemType::kF32, ElemType::kBF16},
                            {ElemType::kBF16, ElemType::kF32}};
  uint32_t seed = 9400;
  for (const RopeCase &c : cases) {
    SCOPED_TRACE(::testing::Message() << "act " << testing::weightTypeName(c.type) << " kv "
                                      << testing::weightTypeName(c.kvType));
    const HalfAttentionBatch b(c.type, c.kvType, seed += 10);
    std::vector<float> expected(b.q.values.size());
    attention(b.args(b.q.values.data(), b.k.values.data(), b.v.values.data(), expected.data(),
                     ElemType::kF32, ElemType::kF32));
    Output out(c.type, expected.size());
    attention(b.args(b.q.data(), b.k.data(), b.v.data(), out.data(), c.type, c.kvType));
    if (activeCpuIsa() == CpuIsa::kAmx && c.type == ElemType::kBF16 && c.kvType == c.type)
      continue; // AttentionOnTilesIsWithinTheWeightRounding checks this case
    expectRoundedOf(out, expected, "attention");
  }
}

// At amx, bf16 attention runs on the tiles (kernels/cpu/attention_amx.cc): fp32 math (bf16 q and
// K products are exact, the softmax weights are split exactly into three bf16 parts), but summed
// in the tiles' order and with exp_lanes.inc's e^x (within 2 ulp of std::exp), so its fp32 result
// is the fp32 run's up to ~1e-6 and rounding it to bf16 may land one bf16 step away: every element
// within 2^-8 of the fp32 run (relative, + 1e-6), and at least 99% of them its exact rounding.
// Over head sizes that fill one or two 64-dimension passes, groups of 1, 3, 4 and 20 query heads
// per kv head (20: two items of one token), with and without a sliding window. Other levels round
// the fp32 result exactly, so the test runs at every level.
struct TileCase {
  int32_t heads, kvHeads, headDim, window;
};
constexpr TileCase kTileCases[] = {{8, 2, 32, 0},  {6, 2, 64, 0},  {9, 3, 64, 7},
                                   {2, 2, 128, 0}, {20, 1, 64, 0}, {4, 1, 96, 20}};

// check(batch) for a bf16 batch of each case, seeds from `seed` on, under the case's trace.
template <class Check> void forEachTileCase(uint32_t seed, Check &&check) {
  for (const TileCase &c : kTileCases) {
    SCOPED_TRACE(::testing::Message() << c.heads << " heads, " << c.kvHeads << " kv, dim "
                                      << c.headDim << ", window " << c.window);
    check(HalfAttentionBatch(ElemType::kBF16, ElemType::kBF16, seed += 10, c.heads, c.kvHeads,
                             c.headDim, c.window));
  }
}

// b's bf16 attention against its fp32 run: every element within 2^-8 of it (relative, + 1e-6),
// and at least 99% of them its exact rounding.
void expectTheFp32ResultRounded(const HalfAttentionBatch &b) {
  const ElemType bf16 = ElemType::kBF16;
  std::vector<float> expected(b.q.values.size());
  attention(b.args(b.q.values.data(), b.k.values.data(), b.v.values.data(), expected.data(),
                   ElemType::kF32, ElemType::kF32));
  Output out(bf16, expected.size());
  attention(b.args(b.q.data(), b.k.data(), b.v.data(), out.data(), bf16, bf16));
  size_t exact = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_LE(std::fabs(double(bf16ToF32(out.halves[i])) - expected[i]),
              std::ldexp(1.0, -8) * std::fabs(expected[i]) + 1e-6)
        << "element " << i;
    exact += out.halves[i] == f32ToBf16(expected[i]);
  }
  EXPECT_GE(double(exact), 0.99 * double(expected.size())); // measured 99.97-100%
}

// b's bf16 prompts attended token by token (as decode steps, or a chunked prefill, would) give the
// bits of one call over all their tokens.
void expectTokenByTokenBits(const HalfAttentionBatch &b) {
  const ElemType bf16 = ElemType::kBF16;
  const int64_t width = int64_t(b.heads) * b.headDim;
  Output whole(bf16, b.q.halves.size());
  attention(b.args(b.q.data(), b.k.data(), b.v.data(), whole.data(), bf16, bf16));
  for (size_t s = 0; s < b.contextLens.size(); ++s)
    for (int32_t t = b.queryStartLoc[s]; t < b.queryStartLoc[s + 1]; ++t) {
      HalfAttentionBatch one = b;
      one.contextLens = {b.positions[t] + 1};
      one.numTokens = 1;
      one.positions = {b.positions[t]};
      one.queryStartLoc = {0, 1};
      one.blockTables.assign(b.blockTables.begin() + s * b.maxBlocksPerSeq,
                             b.blockTables.begin() + (s + 1) * b.maxBlocksPerSeq);
      Output out(bf16, size_t(width));
      attention(
          one.args(b.q.halves.data() + t * width, b.k.data(), b.v.data(), out.data(), bf16, bf16));
      EXPECT_TRUE(
          std::equal(out.halves.begin(), out.halves.end(), whole.halves.begin() + t * width))
          << "token " << t;
    }
}

TEST(HalfKernelsTest, AttentionOnTilesIsTheFp32ResultRounded) {
  forEachTileCase(9700, [&](const HalfAttentionBatch &b) { expectTheFp32ResultRounded(b); });
}

// The tiles fold each (token, head) on its own: the bits of a token do not depend on the tokens
// it is attended with. At other levels this holds as well (the vector loops fold each pair alone
// too).
TEST(HalfKernelsTest, AttentionBf16TokenByTokenGivesTheBitsOfOneCall) {
  forEachTileCase(9800, [&](const HalfAttentionBatch &b) { expectTokenByTokenBits(b); });
}

// Keys that grow along the prompt (position p's times 1 + p) make each pair's running max jump
// by more than the kernels' slack again and again, so accumulators are rescaled mid-item: on the
// tiles (and, at 128 dimensions, between passes), and in attention_f32_avx512.cc's lanes and
// few-pairs layouts (avx512, the token-by-token check comparing the two). At every level: still
// the fp32 result rounded, still the same bits token by token.
TEST(HalfKernelsTest, AttentionFollowsAJumpingMax) {
  for (const CpuIsa isa : availableCpuIsas())
    for (const int32_t headDim : {64, 128}) {
      ASSERT_TRUE(setCpuIsa(isa));
      SCOPED_TRACE(::testing::Message() << cpuIsaName(isa) << " dim " << headDim);
      HalfAttentionBatch b(ElemType::kBF16, ElemType::kBF16, 9900 + headDim, 8, 2, headDim);
      std::vector<float> keys = b.k.values;
      const int64_t blockFloats = int64_t(b.kvHeads) * b.blockSize * b.headDim;
      for (size_t s = 0; s < b.contextLens.size(); ++s)
        for (int32_t p = 0; p < b.contextLens[s]; ++p) {
          const int64_t block = b.blockTables[s * b.maxBlocksPerSeq + p / b.blockSize];
          for (int32_t h = 0; h < b.kvHeads; ++h)
            for (int32_t d = 0; d < b.headDim; ++d)
              keys[block * blockFloats + (int64_t(h) * b.blockSize + p % b.blockSize) * b.headDim +
                   d] *= 1.0f + float(p);
        }
      b.k = makeWeights(keys, ElemType::kBF16);
      expectTheFp32ResultRounded(b);
      expectTokenByTokenBits(b);
    }
  setCpuIsa(detectedCpuIsa());
}

// Each bf16 sequence alone gives the bits it gets inside the batch.
TEST(HalfKernelsTest, AttentionBf16SequencesAreBitIdenticalAloneAndBatched) {
  const ElemType bf16 = ElemType::kBF16;
  const HalfAttentionBatch b(bf16, bf16, 77);
  const int64_t width = int64_t(b.heads) * b.headDim;
  Output batched(bf16, b.q.halves.size());
  attention(b.args(b.q.data(), b.k.data(), b.v.data(), batched.data(), bf16, bf16));
  for (size_t s = 0; s < b.contextLens.size(); ++s) {
    HalfAttentionBatch alone = b;
    const int32_t begin = b.queryStartLoc[s], end = b.queryStartLoc[s + 1];
    alone.contextLens = {b.contextLens[s]};
    alone.numTokens = end - begin;
    alone.positions.assign(b.positions.begin() + begin, b.positions.begin() + end);
    alone.queryStartLoc = {0, alone.numTokens};
    alone.blockTables.assign(b.blockTables.begin() + s * b.maxBlocksPerSeq,
                             b.blockTables.begin() + (s + 1) * b.maxBlocksPerSeq);
    Output out(bf16, size_t(alone.numTokens) * width);
    attention(alone.args(b.q.halves.data() + begin * width, b.k.data(), b.v.data(), out.data(),
                         bf16, bf16));
    EXPECT_TRUE(
        std::equal(out.halves.begin(), out.halves.end(), batched.halves.begin() + begin * width))
        << "sequence " << s;
  }
}

// loadRun of an fp8 E4M3 run (a `--kv-dtype fp8` cache) at every level this CPU has: the values
// of kiln::f8e4m3ToF32 (runtime/base/fp8.h), 16 lanes (bf16_runs_avx512.cc) or the table.
TEST(HalfKernelsTest, Fp8CacheRowsWidenToTheSpecValuesAtEveryLevel) {
  std::vector<uint8_t> codes(256 + 7);
  for (size_t i = 0; i < codes.size(); ++i)
    codes[i] = static_cast<uint8_t>(i * 37 + 11);
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    std::vector<float> out(codes.size());
    loadRun(codes.data(), ElemType::kF8E4M3, 0, static_cast<int64_t>(codes.size()), out.data());
    for (size_t i = 0; i < codes.size(); ++i) {
      const float expected = f8e4m3ToF32(codes[i]);
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(out[i])) << i;
      else
        EXPECT_EQ(out[i], expected) << i << " at " << cpuIsaName(isa);
    }
  }
  setCpuIsa(detectedCpuIsa());
}

} // namespace
} // namespace kiln::kernels::cpu
