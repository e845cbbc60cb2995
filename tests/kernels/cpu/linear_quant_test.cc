// Linear with quantized weights (kernels/cpu/linear_quant.cc) against a double-precision reference
// over the dequantized weights, and its batch invariance, at every instruction-set level this CPU
// has (kernels/cpu/cpu_isa.h), as tests/kernels/cpu/linear_test.cc does for dense weights. The
// weights are written here byte by byte in the layout of runtime/base/quant_layout.h and
// dequantized here, independently of the kernels.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"
#include "runtime/base/quant_layout.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::GroupParams;
using testing::makeWeights;
using testing::QuantMatrixBytes;
using testing::randomFloats;
using testing::randomQuantized;
using testing::TypedWeights;

const char *elemTypeName(ElemType type) {
  return testing::weightTypeName(type);
}

// y as stored in outType, read back as fp32.
struct Output {
  ElemType type;
  std::vector<float> f32;
  std::vector<uint16_t> halves;
  void *data() { return type == ElemType::kF32 ? (void *)f32.data() : (void *)halves.data(); }
  float at(size_t i) const {
    if (type == ElemType::kF32)
      return f32[i];
    return type == ElemType::kF16 ? f16ToF32(halves[i]) : bf16ToF32(halves[i]);
  }
  std::vector<float> row(int32_t r, int32_t width) const {
    std::vector<float> values(width);
    for (int32_t o = 0; o < width; ++o)
      values[o] = at(size_t(r) * width + o);
    return values;
  }
};

struct Call {
  const TypedWeights &x; // x.type is the call's xType
  const QuantMatrixBytes &w;
  const std::vector<float> *bias;
  int32_t rows, in, out;
  ElemType outType = ElemType::kF32;
  WeightType weightType = WeightType::kF32; // must not be read
  bool pack = true;                         // false: the weights as stored, whatever the level
};

// As the cpu device runs it: with the weights packed where the level packs them (from avx512 up,
// and at avx2 with F16C: the panels of kernels/cpu/linear_quant.h), read as stored otherwise.
Output runLinear(const Call &call) {
  Output y{call.outType, {}, {}};
  const size_t n = size_t(call.rows) * call.out;
  if (call.outType == ElemType::kF32)
    y.f32.assign(n, -12345.0f);
  else
    y.halves.assign(n, 0x7BFF);
  LinearArgs args{
      call.x.data(), call.w.bytes.data(), call.weightType, call.bias ? call.bias->data() : nullptr,
      y.data(),      call.rows,           call.in,         call.out};
  args.xType = call.x.type;
  args.outType = call.outType;
  args.quant = call.w.quant;
  const size_t packedBytes =
      linearPackedWeightBytes(call.weightType, call.out, call.in, args.quant);
  std::vector<uint32_t> packed((packedBytes + 3) / 4, 0xdeadbeefu);
  if (packedBytes > 0 && call.pack) {
    packLinearWeights(call.w.bytes.data(), call.weightType, call.out, call.in, packed.data(),
                      args.quant);
    args.packedWeight = packed.data();
  }
  linear(args);
  return y;
}

// Half of an ulp of outType at |v|: the rounding of the stored output (fp16 subnormals included).
double roundingBound(ElemType type, double v) {
  switch (type) {
  case ElemType::kF32:
    return 0.0;
  case ElemType::kF16:
    return std::fabs(v) * 0x1p-11 + 0x1p-25;
  case ElemType::kBF16:
    return std::fabs(v) * 0x1p-8;
  }
  return 0.0;
}

// As tests/kernels/cpu/linear_test.cc: the fp32 accumulation error, relative to sum |x*w|, plus
// 1e-6 for the bias add, plus the rounding to outType.
constexpr double kRelativeTolerance = 1e-5;

void expectMatchesReference(const Call &call, const Output &y) {
  for (int32_t r = 0; r < call.rows; ++r)
    for (int32_t o = 0; o < call.out; ++o) {
      double sum = 0.0, magnitude = 0.0;
      for (int32_t i = 0; i < call.in; ++i) {
        const double term = double(call.x.values[r * call.in + i]) * call.w.values[o * call.in + i];
        sum += term;
        magnitude += std::fabs(term);
      }
      if (call.bias)
        sum += (*call.bias)[o];
      const double got = y.at(size_t(r) * call.out + o);
      ASSERT_NEAR(got, sum,
                  kRelativeTolerance * magnitude + 1e-6 + roundingBound(call.outType, sum))
          << "row " << r << " out " << o;
    }
}

class LinearQuantTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

constexpr QuantFormat kFormats[] = {QuantFormat::kQ8,      QuantFormat::kQ4,
                                    QuantFormat::kQ4Min,   QuantFormat::kQ4Zero,
                                    QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32};
constexpr ElemType kTypes[] = {ElemType::kF32, ElemType::kF16, ElemType::kBF16};

// Groups of 32, 64, 128 and per channel (0 here: groupSize = inFeatures); 96 and 160 columns are
// not whole 64-column steps, 7 and 33 outputs not whole 4- or 16-output tiles, 9 and 20 rows not
// whole 4- or 8-row tiles. weightType cycles through every value: it must not be read.
TEST_P(LinearQuantTest, MatchesDoubleReferenceOverShapeGrid) {
  uint32_t seed = 1;
  for (QuantFormat format : kFormats)
    for (int32_t group : {32, 64, 128, 0})
      for (ElemType xType : kTypes)
        for (ElemType outType : kTypes)
          for (int32_t in : {32, 96, 160, 256, 384})
            for (int32_t rows : {1, 5, 9, 20})
              for (int32_t out : {1, 7, 33}) {
                const int32_t groupSize = group ? group : in;
                if (in % groupSize != 0)
                  continue;
                SCOPED_TRACE(::testing::Message()
                             << quantFormatName(format) << " group=" << groupSize
                             << " x=" << elemTypeName(xType) << " out=" << elemTypeName(outType)
                             << " rows=" << rows << " in=" << in << " outs=" << out);
                const auto x = makeWeights(randomFloats(size_t(rows) * in, ++seed), xType);
                const auto w = randomQuantized(format, out, in, groupSize, ++seed);
                const auto bias = randomFloats(out, ++seed);
                const bool withBias = seed % 2 == 0;
                Call call{x, w, withBias ? &bias : nullptr, rows, in, out, outType};
                call.weightType = kTypes[seed % 3];
                expectMatchesReference(call, runLinear(call));
              }
}

// Weights nobody packed (the levels that run panels read them through the dot-product tiles of
// kernels/cpu/linear_quant.cc: linear_quant_avx2.cc from avx2 up), through each row path (1-4,
// 5-8 and more rows a tile), grouped and per channel.
TEST_P(LinearQuantTest, UnpackedWeightsMatchReference) {
  uint32_t seed = 300;
  for (QuantFormat format : kFormats)
    for (int32_t group : {32, 192})
      for (int32_t rows : {1, 3, 6, 8, 40}) {
        SCOPED_TRACE(::testing::Message()
                     << quantFormatName(format) << " group=" << group << " rows=" << rows);
        const int32_t in = 192, out = 21;
        const auto x = makeWeights(randomFloats(size_t(rows) * in, ++seed), ElemType::kF32);
        const auto w = randomQuantized(format, out, in, group, ++seed);
        Call call{x, w, nullptr, rows, in, out, ElemType::kF32};
        call.pack = false;
        expectMatchesReference(call, runLinear(call));
      }
}

// SmolLM2-135M's decode shapes, one row: long weight rows, many output tiles across the workers.
TEST_P(LinearQuantTest, DecodeShapesMatchReference) {
  uint32_t seed = 100;
  for (QuantFormat format : kFormats)
    for (auto [in, out] : {std::pair{576, 192}, std::pair{1536, 576}}) {
      SCOPED_TRACE(::testing::Message() << quantFormatName(format) << " in=" << in);
      const auto x = makeWeights(randomFloats(in, ++seed), ElemType::kBF16);
      const auto w = randomQuantized(format, out, in, 64, ++seed);
      const Call call{x, w, nullptr, 1, in, out, ElemType::kBF16};
      expectMatchesReference(call, runLinear(call));
    }
}

// A row's outputs are bit-identical alone and anywhere in a batch: 21 rows end in a partial row
// tile and micro-tile, 70 rows span nine row tiles, and 530 rows of half x are more row tiles than
// a worker keeps widened (kernels/cpu/linear_quant.cc), so each task widens its own.
TEST_P(LinearQuantTest, RowResultsAreBitIdenticalAcrossBatchSizes) {
  const int32_t out = 37;
  for (QuantFormat format : kFormats)
    for (ElemType xType : {ElemType::kF32, ElemType::kBF16})
      for (auto [in, group, rows] :
           {std::tuple{160, 32, 21}, std::tuple{576, 576, 70}, std::tuple{96, 32, 530}}) {
        SCOPED_TRACE(::testing::Message() << quantFormatName(format) << " x=" << elemTypeName(xType)
                                          << " in=" << in << " rows=" << rows);
        const auto w = randomQuantized(format, out, in, group, 11);
        const auto bias = randomFloats(out, 12);
        const auto x = makeWeights(randomFloats(size_t(rows) * in, 13), xType);
        const auto batched = runLinear({x, w, &bias, rows, in, out});
        for (int32_t r : {0, 3, 7, 8, 20, 63, 69, 529}) {
          if (r >= rows)
            continue;
          const std::vector<float> xRow(x.values.begin() + r * in, x.values.begin() + (r + 1) * in);
          const auto alone = runLinear({makeWeights(xRow, xType), w, &bias, 1, in, out});
          EXPECT_TRUE(testing::bitwiseEqual(alone.row(0, out), batched.row(r, out))) << "row " << r;
        }
      }
}

// The extreme stored values (Q8 -128 and 127, Q4 and Q4M nibbles 0 and 15) with x and scales
// chosen so that every product and partial sum is exact: every level must give the reference
// exactly.
TEST_P(LinearQuantTest, ExtremeValuesGiveExactSums) {
  const int32_t rows = 3, in = 96, out = 5;
  std::vector<float> xValues(size_t(rows) * in);
  for (size_t i = 0; i < xValues.size(); ++i)
    xValues[i] = float(int(i % 5) - 2); // -2..2
  const auto x = makeWeights(xValues, ElemType::kF32);
  for (QuantFormat format : kFormats) {
    SCOPED_TRACE(quantFormatName(format));
    // Scales 0.5, mins 1.25, zero points 3: every weight is a multiple of 1/4 below 2^8 in
    // magnitude (Q8F's codes 0x7E and 0x80: 448 and -0).
    const auto w = testing::writeQuantized(
        format, out, in, 32, 5,
        [](std::mt19937 &) {
          return GroupParams{0.5f, 1.25f, 3};
        },
        [format](std::mt19937 &rng) {
          const bool high = rng() % 2;
          return isByteQuant(format) ? (high ? 127 : -128) : (high ? 15 : 0);
        });
    const auto y = runLinear({x, w, nullptr, rows, in, out});
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t o = 0; o < out; ++o) {
        double sum = 0.0;
        for (int32_t i = 0; i < in; ++i)
          sum += double(xValues[r * in + i]) * w.values[o * in + i];
        EXPECT_EQ(y.at(size_t(r) * out + o), sum) << "row " << r << " out " << o;
      }
  }
}

TEST_P(LinearQuantTest, ZeroRowsWritesNothing) {
  const auto w = randomQuantized(QuantFormat::kQ4, 4, 32, 32, 3);
  std::vector<float> y(4, 5.0f);
  LinearArgs args{nullptr, w.bytes.data(), WeightType::kF32, nullptr, y.data(), 0, 32, 4};
  args.quant = w.quant;
  linear(args);
  EXPECT_EQ(y, std::vector<float>(4, 5.0f));
}

// Weights nobody packed run the avx2 code at the AVX-512 levels: the same bits as avx2 itself,
// and the panels' results within the reference's tolerance of them (both are checked against it
// above); through every row path of each (1-4, 5-8 and more rows a tile).
TEST(LinearQuantLevels, UnpackedWeightsAtAvx512RunTheAvx2Code) {
  const std::vector<CpuIsa> levels = availableCpuIsas();
  if (std::find(levels.begin(), levels.end(), CpuIsa::kAvx512) == levels.end()) {
    // A CPU without AVX-512 (CI runs on such machines too): the level cannot be forced, so its
    // code is never run; that refusal is what is checked here.
    EXPECT_FALSE(setCpuIsa(CpuIsa::kAvx512));
    return;
  }
  for (QuantFormat format : kFormats)
    for (int32_t rows : {1, 3, 6, 8, 40}) {
      SCOPED_TRACE(::testing::Message() << quantFormatName(format) << " rows=" << rows);
      const int32_t in = 192, out = 21;
      const auto w = randomQuantized(format, out, in, 64, 21);
      const auto x = makeWeights(randomFloats(size_t(rows) * in, 22), ElemType::kF32);
      std::vector<float> results[2];
      int i = 0;
      for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        ASSERT_TRUE(setCpuIsa(isa));
        std::vector<float> y(size_t(rows) * out);
        LinearArgs args{x.data(), w.bytes.data(), WeightType::kF32, nullptr, y.data(), rows, in,
                        out};
        args.quant = w.quant;
        linear(args); // no packedWeight
        results[i++] = y;
      }
      setCpuIsa(detectedCpuIsa());
      EXPECT_TRUE(testing::bitwiseEqual(results[0], results[1]));
    }
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, LinearQuantTest,
                         ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

} // namespace
} // namespace kiln::kernels::cpu
