// Linear with integer weights on int8-quantized rows (KILN_CPU_ACTIVATIONS=int8,
// kernels/cpu/linear_quant_int8.h): against a double-precision reference that quantizes x by the
// rule that header states, written here independently; every level, packed or not, giving the
// same bits; batch invariance; non-finite and zero rows; fp8 weights unaffected.
#include "kernels/cpu/activation_mode.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_quant_int8.h"
#include "runtime/base/quant_layout.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::makeWeights;
using testing::QuantMatrixBytes;
using testing::randomFloats;
using testing::randomQuantized;
using testing::TypedWeights;

constexpr QuantFormat kIntFormats[] = {QuantFormat::kQ8, QuantFormat::kQ4, QuantFormat::kQ4Min,
                                       QuantFormat::kQ4Zero};

// Sets the activation mode for a test and restores fp32 and the detected level after it.
class Int8Mode : public ::testing::Test {
protected:
  void SetUp() override { setCpuActivations(CpuActivations::kInt8); }
  void TearDown() override {
    setCpuActivations(CpuActivations::kF32);
    setCpuIsa(detectedCpuIsa());
  }
};

// fp32 y of rows x out, weights packed where the level packs them unless `pack` is false.
std::vector<float> run(const TypedWeights &x, const QuantMatrixBytes &w, const float *bias,
                       int32_t rows, int32_t in, int32_t out, bool pack = true) {
  std::vector<float> y(size_t(rows) * out, -12345.0f);
  LinearArgs args{x.data(), w.bytes.data(), WeightType::kF32, bias, y.data(), rows, in, out};
  args.xType = x.type;
  args.quant = w.quant;
  const size_t packedBytes = linearPackedWeightBytes(WeightType::kF32, out, in, w.quant);
  std::vector<uint32_t> packed((packedBytes + 3) / 4);
  if (packedBytes > 0 && pack) {
    packLinearWeights(w.bytes.data(), WeightType::kF32, out, in, packed.data(), w.quant);
    args.packedWeight = packed.data();
  }
  linear(args);
  return y;
}

// x^ = d * q per block of 32, by the rule of kernels/cpu/linear_quant_int8.h (finite x).
std::vector<double> quantizedRow(const float *x, int32_t in) {
  std::vector<double> out(in);
  for (int32_t b = 0; b < in; b += 32) {
    float amax = 0.0f;
    for (int32_t k = b; k < b + 32; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    const float d = amax / 127.0f, inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int32_t k = b; k < b + 32; ++k) {
      const float q = std::nearbyint(x[k] * inverse);
      EXPECT_LE(std::fabs(q), 127.0f);
      out[k] = double(d) * q;
    }
  }
  return out;
}

// Each output within 1e-5 of sum |x^ w| (+ 1e-6 for the bias) of sum x^ w in double.
void expectMatchesReference(const TypedWeights &x, const QuantMatrixBytes &w,
                            const std::vector<float> *bias, int32_t rows, int32_t in, int32_t out,
                            const std::vector<float> &y) {
  for (int32_t r = 0; r < rows; ++r) {
    const std::vector<double> xq = quantizedRow(x.values.data() + size_t(r) * in, in);
    for (int32_t o = 0; o < out; ++o) {
      double sum = bias ? (*bias)[o] : 0.0, magnitude = 0.0;
      for (int32_t i = 0; i < in; ++i) {
        sum += xq[i] * w.values[size_t(o) * in + i];
        magnitude += std::fabs(xq[i] * w.values[size_t(o) * in + i]);
      }
      ASSERT_NEAR(y[size_t(r) * out + o], sum, 1e-5 * magnitude + 1e-6)
          << "row " << r << " out " << o;
    }
  }
}

// The reference is not the fp32 product: how far apart they are (so a kernel that ignored the
// mode would fail the test above on these shapes).
TEST_F(Int8Mode, DiffersFromFp32RowsByTheQuantization) {
  const int32_t rows = 4, in = 256, out = 16;
  const auto x = makeWeights(randomFloats(size_t(rows) * in, 7), WeightType::kF32);
  const auto w = randomQuantized(QuantFormat::kQ8, out, in, 32, 8);
  const auto int8 = run(x, w, nullptr, rows, in, out);
  setCpuActivations(CpuActivations::kF32);
  const auto fp32 = run(x, w, nullptr, rows, in, out);
  double largest = 0.0;
  for (size_t i = 0; i < int8.size(); ++i)
    largest = std::max(largest, std::fabs(double(int8[i]) - fp32[i]));
  EXPECT_GT(largest, 1e-4);
}

// Every format, groups of 32 / 64 / 128 / per channel, fp32 / bf16 x, rows through every
// micro-kernel (1-4 rows) and past a row tile, outputs not whole panels, at every level.
TEST_F(Int8Mode, MatchesQuantizedReferenceAtEveryLevel) {
  uint32_t seed = 1;
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    for (QuantFormat format : kIntFormats)
      for (int32_t group : {32, 64, 128, 0})
        for (ElemType xType : {ElemType::kF32, ElemType::kBF16})
          for (int32_t in : {128, 384})
            for (int32_t rows : {1, 2, 3, 7, 70})
              for (int32_t out : {5, 40}) {
                const int32_t groupSize = group ? group : in;
                if (in % groupSize != 0)
                  continue;
                SCOPED_TRACE(::testing::Message()
                             << cpuIsaName(isa) << " " << quantFormatName(format)
                             << " group=" << groupSize << " bf16 x=" << (xType == ElemType::kBF16)
                             << " rows=" << rows << " in=" << in << " out=" << out);
                const auto x = makeWeights(randomFloats(size_t(rows) * in, ++seed), xType);
                const auto w = randomQuantized(format, out, in, groupSize, ++seed);
                const auto bias = randomFloats(out, ++seed);
                const std::vector<float> *b = seed % 2 ? &bias : nullptr;
                expectMatchesReference(x, w, b, rows, in, out,
                                       run(x, w, b ? b->data() : nullptr, rows, in, out));
              }
  }
}

// The packed panels (from avx2 with F16C up) and the portable rows give the same bits, at every
// level, packed or not. Rows 16 / 33 / 64 / 70 / 140 take the AMX tiles' row groups of 16 with and
// without VNNI rows after them, and a worker's next row tile on the B tiles it built for the last.
TEST_F(Int8Mode, EveryLevelAndPathGivesTheSameBits) {
  for (QuantFormat format : kIntFormats)
    for (int32_t group : {32, 64, 0})
      for (int32_t rows : {1, 3, 6, 16, 33, 40, 64, 70, 140}) {
        const int32_t in = 192, out = 37;
        SCOPED_TRACE(::testing::Message()
                     << quantFormatName(format) << " group=" << group << " rows=" << rows);
        const auto x = makeWeights(randomFloats(size_t(rows) * in, 21), ElemType::kF32);
        const auto w = randomQuantized(format, out, in, group ? group : in, 22);
        ASSERT_TRUE(setCpuIsa(CpuIsa::kSse2));
        const auto portable = run(x, w, nullptr, rows, in, out);
        for (CpuIsa isa : availableCpuIsas())
          for (bool pack : {true, false}) {
            ASSERT_TRUE(setCpuIsa(isa));
            EXPECT_TRUE(testing::bitwiseEqual(portable, run(x, w, nullptr, rows, in, out, pack)))
                << cpuIsaName(isa) << " pack=" << pack;
          }
      }
}

// From avx512 up a CPU with VNNI runs the int8 panels on it (linear_quant_int8_vnni.cc), so the
// test above compares them with the avx2 panels' bits there.
TEST_F(Int8Mode, Avx512LevelsRunTheVnniPanelsWhereTheCpuHasThem) {
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    EXPECT_EQ(linear_quant::int8PanelsRunVnni(), isa >= CpuIsa::kAvx512 && cpuHasAvx512Vnni())
        << cpuIsaName(isa);
  }
  if (!cpuHasAvx512Vnni())
    std::printf("no AVX512-VNNI on this CPU: the VNNI panels are checked where there is one\n");
}

// At amx a CPU with AMX-INT8 runs whole groups of 16 rows on the tiles (linear_quant_int8_amx.cc),
// so the tests above compare them with the other paths' bits there.
TEST_F(Int8Mode, TheAmxLevelRunsTheInt8TilesWhereTheCpuHasThem) {
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    EXPECT_EQ(linear_quant::int8PanelsRunAmx(),
              isa == CpuIsa::kAmx && cpuHasAmxInt8() && cpuHasAvx512Vnni())
        << cpuIsaName(isa);
  }
  if (detectedCpuIsa() != CpuIsa::kAmx || !cpuHasAmxInt8())
    std::printf("no AMX-INT8 level on this CPU: the int8 tiles are checked where there is one\n");
}

// A row's outputs are the same bits alone and anywhere in a batch.
TEST_F(Int8Mode, RowResultsAreBitIdenticalAcrossBatchSizes) {
  const int32_t in = 160, out = 37, rows = 70;
  for (QuantFormat format : kIntFormats) {
    SCOPED_TRACE(quantFormatName(format));
    const auto w = randomQuantized(format, out, in, 32, 11);
    const auto bias = randomFloats(out, 12);
    const auto x = makeWeights(randomFloats(size_t(rows) * in, 13), ElemType::kF32);
    const auto batched = run(x, w, bias.data(), rows, in, out);
    for (int32_t r : {0, 3, 7, 63, 69}) {
      const std::vector<float> xRow(x.values.begin() + r * in, x.values.begin() + (r + 1) * in);
      const auto alone = run(makeWeights(xRow, ElemType::kF32), w, bias.data(), 1, in, out);
      EXPECT_TRUE(testing::bitwiseEqual(
          alone, std::vector<float>(batched.begin() + r * out, batched.begin() + (r + 1) * out)))
          << "row " << r;
    }
  }
}

// A worker keeps a call's int8 rows up to 2^20 values (linear_quant.cc Int8Cache); past that each
// task quantizes its row tile again. Both give a row the bits it has alone, fp32 and bf16 x.
TEST_F(Int8Mode, RowsPastTheKeptRowsAreBitIdenticalToARowAlone) {
  const int32_t in = 8192, out = 20, rows = 130; // 1.06M values: not kept
  for (QuantFormat format : {QuantFormat::kQ8, QuantFormat::kQ4Zero})
    for (ElemType xType : {ElemType::kF32, ElemType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << quantFormatName(format) << " " << int(xType));
      const auto w = randomQuantized(format, out, in, 64, 41);
      const auto x = makeWeights(randomFloats(size_t(rows) * in, 43), xType);
      const auto batched = run(x, w, nullptr, rows, in, out);
      for (int32_t r : {0, 64, 129}) {
        const std::vector<float> xRow(x.values.begin() + int64_t(r) * in,
                                      x.values.begin() + int64_t(r + 1) * in);
        const auto alone = run(makeWeights(xRow, xType), w, nullptr, 1, in, out);
        EXPECT_TRUE(testing::bitwiseEqual(
            alone, std::vector<float>(batched.begin() + r * out, batched.begin() + (r + 1) * out)))
            << "row " << r;
      }
    }
}

// A block of zeros contributes nothing; a NaN or infinity anywhere in a row makes its outputs
// NaN, as fp32 rows would, at every level.
TEST_F(Int8Mode, ZeroAndNonFiniteRows) {
  const int32_t rows = 3, in = 64, out = 20;
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    for (QuantFormat format : kIntFormats) {
      SCOPED_TRACE(::testing::Message() << cpuIsaName(isa) << " " << quantFormatName(format));
      std::vector<float> values = randomFloats(size_t(rows) * in, 5);
      for (int32_t k = 0; k < 32; ++k)
        values[k] = 0.0f; // row 0: first block zero
      for (int32_t k = in; k < 2 * in; ++k)
        values[k] = 0.0f; // row 1: all zero
      values[2 * in + 40] = std::nanf("");
      const auto x = makeWeights(values, ElemType::kF32);
      const auto w = randomQuantized(format, out, in, 32, 6);
      const auto y = run(x, w, nullptr, rows, in, out);
      for (int32_t o = 0; o < out; ++o) {
        EXPECT_EQ(y[out + o], 0.0f) << o;
        EXPECT_TRUE(std::isnan(y[2 * out + o])) << o;
      }
      expectMatchesReference(x, w, nullptr, 1, in, out, y);
      values[2 * in + 40] = INFINITY;
      EXPECT_TRUE(
          std::isnan(run(makeWeights(values, ElemType::kF32), w, nullptr, rows, in, out)[2 * out]));
    }
  }
}

// The largest integer sums: every q at +-127 (a row of equal magnitudes) times Q8 -128 / 127 or
// 4-bit 15 / 0 everywhere, where an int16 partial sum would saturate if it held more than the
// kernels allow; every level against the reference.
TEST_F(Int8Mode, ExtremeValuesDoNotSaturate) {
  const int32_t rows = 2, in = 128, out = 17;
  std::vector<float> values(size_t(rows) * in);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = i < size_t(in) ? 1.5f : (i % 64 < 32 ? -0.75f : 0.75f);
  const auto x = makeWeights(values, ElemType::kF32);
  for (CpuIsa isa : availableCpuIsas()) {
    ASSERT_TRUE(setCpuIsa(isa));
    for (QuantFormat format : kIntFormats)
      for (bool high : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << cpuIsaName(isa) << " " << quantFormatName(format) << " high=" << high);
        const auto w = testing::writeQuantized(
            format, out, in, 64, 3,
            [](std::mt19937 &) {
              return testing::GroupParams{0.5f, 1.25f, 3};
            },
            [format, high](std::mt19937 &) {
              return isByteQuant(format) ? (high ? 127 : -128) : (high ? 15 : 0);
            });
        expectMatchesReference(x, w, nullptr, rows, in, out, run(x, w, nullptr, rows, in, out));
      }
  }
}

// fp8 weights keep fp32 rows: the same bits in either mode.
TEST_F(Int8Mode, Fp8WeightsAreUnaffected) {
  for (QuantFormat format : {QuantFormat::kQ8Float, QuantFormat::kQ8FloatF32}) {
    const int32_t rows = 5, in = 128, out = 19;
    const auto x = makeWeights(randomFloats(size_t(rows) * in, 31), ElemType::kF32);
    const auto w = randomQuantized(format, out, in, 32, 32);
    const auto int8 = run(x, w, nullptr, rows, in, out);
    setCpuActivations(CpuActivations::kF32);
    EXPECT_TRUE(testing::bitwiseEqual(int8, run(x, w, nullptr, rows, in, out)))
        << quantFormatName(format);
    setCpuActivations(CpuActivations::kInt8);
  }
}

TEST(CpuActivationsEnv, NamesTheModesItTakes) {
  ::setenv("KILN_CPU_ACTIVATIONS", "int4", 1);
  EXPECT_EQ(cpuActivationsEnvError(),
            "KILN_CPU_ACTIVATIONS='int4' is not a mode: use fp32 or int8");
  for (const char *ok : {"int8", "fp32", ""}) {
    ::setenv("KILN_CPU_ACTIVATIONS", ok, 1);
    EXPECT_EQ(cpuActivationsEnvError(), "") << ok;
  }
  ::unsetenv("KILN_CPU_ACTIVATIONS");
  EXPECT_EQ(activeCpuActivations(), CpuActivations::kF32);
}

} // namespace
} // namespace kiln::kernels::cpu
