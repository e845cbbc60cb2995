// Linear against a double-precision reference and its batch invariance, at every instruction-set
// level this CPU has (kernels/cpu/cpu_isa.h: the suite is instantiated once per level, so a
// machine with AVX-512 also checks the AVX2 and SSE2 tiles), plus the level selection itself.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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
  LinearArgs args{x.data(), w.data(), w.type, bias ? bias->data() : nullptr,
                  y.data(), rows,     in,     out};
  linear(args);
  return y;
}

// fp32 accumulation error grows with k: bound it by a relative tolerance on sum |x*w| (the
// magnitude of the dot product's terms), plus 1e-6 absolute for the bias add. Per level: sse2 sums
// 4 lanes with separate multiply and add, avx2 8 and avx512 16 lanes with fused multiply-adds
// (fewer roundings, shorter chains), except fp32 and half weights from avx2 up, which sum each
// output as one chain of fused multiply-adds per 64-column block
// (kernels/cpu/linear_panels_impl.inc); amx's bf16-weight tiles sum in the tile unit's own order
// (kernels/cpu/linear_amx.cc); 1e-5 bounds all of them over this grid.
double relativeTolerance(CpuIsa isa) {
  switch (isa) {
  case CpuIsa::kSse2:
    return 1e-5;
  case CpuIsa::kAvx2:
    return 1e-5;
  case CpuIsa::kAvx512:
  case CpuIsa::kAvx512Bf16:
  case CpuIsa::kAmx:
    return 1e-5;
  }
  return 0;
}

// At amx a Linear with bf16 weights multiplies x rounded to bf16 (nearest even), as llama.cpp's
// and vLLM's bf16 paths do; its reference is the double sum over those rounded values. (Against
// the unrounded x, each term may then differ by up to 2^-9 of itself.)
bool roundsXToBf16(CpuIsa isa, WeightType type) {
  return isa == CpuIsa::kAmx && type == WeightType::kBF16;
}

// Runs each test at one level and puts the detected one back.
class LinearTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

void expectMatchesReference(const std::vector<float> &x, const TypedWeights &w,
                            const std::vector<float> *bias, const std::vector<float> &y,
                            int32_t rows, int32_t in, int32_t out) {
  const bool roundX = roundsXToBf16(activeCpuIsa(), w.type);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t o = 0; o < out; ++o) {
      double sum = 0.0, magnitude = 0.0;
      for (int32_t i = 0; i < in; ++i) {
        const float xi = roundX ? bf16ToF32(f32ToBf16(x[r * in + i])) : x[r * in + i];
        const double term = static_cast<double>(xi) * w.values[o * in + i];
        sum += term;
        magnitude += std::fabs(term);
      }
      if (bias)
        sum += (*bias)[o];
      ASSERT_NEAR(y[r * out + o], sum, relativeTolerance(activeCpuIsa()) * magnitude + 1e-6)
          << "row " << r << " out " << o;
    }
  }
}

TEST_P(LinearTest, MatchesDoubleReferenceOverShapeGrid) {
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

TEST_P(LinearTest, LargeDecodeShapeMatchesReference) {
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
// bit-identical when computed alone, at another position, or inside a larger batch. 300 columns
// cross the 256-wide k block with a partial last pair block (bf16); 1100 also cross the 1024-column
// chunks a streaming tile converts x in when it cannot keep it; at 8200, 300 rows are more x than
// a worker keeps converted (linear_tile.h kMaxCachedXFloats), so those tiles convert it block by
// block while a row alone is kept whole. 70 rows end in a streamed 6-row tile, 300 in a blocked
// 44-row one. On fp32 panels (avx512 and up) 70 rows run in one-panel tasks of 12- and 11-row
// micro-kernels, 300 in two-panel tasks of 6-row ones (the 37 outputs: a whole panel and 5 of the
// next), a row alone in one-panel tasks of one row; at avx2 (16-output panels: 37 outputs are two
// whole panels and 5) every task is one panel, 70 rows in 6- and 5-row micro-kernels; 8200 columns
// are 129 blocks, and at amx put each 64-row tile of rounded x in a window of its own
// (kernels/cpu/linear_amx.cc kMaxXWords).
TEST_P(LinearTest, RowResultsAreBitIdenticalAcrossBatchSizes) {
  const int32_t out = 37;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (int32_t in : {300, 1100, 8200})
      for (int32_t rows : {70, 300}) {
        SCOPED_TRACE(::testing::Message()
                     << testing::weightTypeName(type) << " in=" << in << " rows=" << rows);
        const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, 11), type);
        const auto bias = randomFloats(out, 12);
        const auto x = randomFloats(static_cast<size_t>(rows) * in, 13);
        const auto batched = runLinear(x, w, &bias, rows, in, out);
        for (int32_t r : {0, 3, 63, 64, 69, 255, 256, 299}) {
          if (r >= rows)
            continue;
          const std::vector<float> xRow(x.begin() + r * in, x.begin() + (r + 1) * in);
          const auto alone = runLinear(xRow, w, &bias, 1, in, out);
          const std::vector<float> batchedRow(batched.begin() + r * out,
                                              batched.begin() + (r + 1) * out);
          EXPECT_TRUE(testing::bitwiseEqual(alone, batchedRow)) << "row " << r;
        }
      }
}

// A level may read weights packed ahead in a layout of its own, when the op is prepared: amx packs
// bf16 weights in the tiles' pair layout, avx2 packs fp32, bf16 and (with F16C) fp16 weights in
// 16-output panels and avx512 and up in 32-output ones (kernels/cpu/linear_panels_impl.inc); no
// other level or type packs.
// Packed weights give the very bits the stored ones give (and so the reference's values), for any
// rows.
bool packs(CpuIsa isa, WeightType type) {
  const bool panels = type == WeightType::kF32 || type == WeightType::kBF16 ||
                      (type == WeightType::kF16 && cpuHasF16c());
  return (isa == CpuIsa::kAmx && type == WeightType::kBF16) || (isa >= CpuIsa::kAvx2 && panels);
}

TEST_P(LinearTest, PackedWeightsGiveTheBitsOfTheStoredOnes) {
  uint32_t seed = 500;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (int32_t rows : {1, 5, 16, 17, 64, 130})
      for (int32_t in : {8, 300, 576})
        for (int32_t out : {7, 33, 64, 130}) {
          SCOPED_TRACE(::testing::Message() << testing::weightTypeName(type) << " rows=" << rows
                                            << " in=" << in << " out=" << out);
          const size_t bytes = linearPackedWeightBytes(type, out, in);
          ASSERT_EQ(bytes > 0, packs(GetParam(), type));
          if (bytes == 0)
            continue;
          const auto x = randomFloats(static_cast<size_t>(rows) * in, ++seed);
          const auto w = makeWeights(randomFloats(static_cast<size_t>(out) * in, ++seed), type);
          const auto bias = randomFloats(out, ++seed);
          std::vector<uint32_t> packed((bytes + 3) / 4, 0xdeadbeefu);
          packLinearWeights(w.data(), type, out, in, packed.data());
          const auto stored = runLinear(x, w, &bias, rows, in, out);
          std::vector<float> y(stored.size(), -12345.0f);
          LinearArgs args{x.data(), w.data(), w.type, bias.data(), y.data(), rows, in, out};
          args.packedWeight = packed.data();
          linear(args);
          EXPECT_TRUE(testing::bitwiseEqual(y, stored));
          expectMatchesReference(x, w, &bias, y, rows, in, out);
        }
}

// On panels (avx2 up to avx512bf16) half weights are kept in their type and widened after each
// load, then multiplied as fp32 panels are: a bf16 or fp16 Linear's outputs are the bits of the
// fp32 Linear on the widened weights, packed or not, for decode rows and prefill tasks of several
// panels. (A widening that lost or moved bits, or a packing that mixed up columns, would show.)
void expectHalfPanelsMultiplyAsFp32(WeightType type) {
  uint32_t seed = 900;
  for (int32_t rows : {1, 7, 130})
    for (int32_t in : {8, 300, 576})
      for (int32_t out : {7, 33, 130}) {
        SCOPED_TRACE(::testing::Message() << "rows=" << rows << " in=" << in << " out=" << out);
        const auto x = randomFloats(static_cast<size_t>(rows) * in, ++seed);
        const auto half = makeWeights(randomFloats(static_cast<size_t>(out) * in, ++seed), type);
        const auto widened = makeWeights(half.values, WeightType::kF32);
        const auto bias = randomFloats(out, ++seed);
        const auto fp32 = runLinear(x, widened, &bias, rows, in, out);
        EXPECT_TRUE(testing::bitwiseEqual(runLinear(x, half, &bias, rows, in, out), fp32));
        std::vector<uint32_t> packed((linearPackedWeightBytes(type, out, in) + 3) / 4);
        packLinearWeights(half.data(), type, out, in, packed.data());
        std::vector<float> y(fp32.size(), -12345.0f);
        LinearArgs args{x.data(), half.data(), half.type, bias.data(), y.data(), rows, in, out};
        args.packedWeight = packed.data();
        linear(args);
        EXPECT_TRUE(testing::bitwiseEqual(y, fp32));
      }
}

TEST_P(LinearTest, ZeroRowsWritesNothing) {
  const auto w = makeWeights(randomFloats(16, 3), WeightType::kF32);
  std::vector<float> y(4, 5.0f);
  LinearArgs args{nullptr, w.data(), w.type, nullptr, y.data(), 0, 4, 4};
  linear(args);
  EXPECT_EQ(y, std::vector<float>(4, 5.0f));
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, LinearTest, ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

// Every level with half panels this CPU has (every CPU CI runs on has avx2 and F16C).
TEST(LinearHalfPanelsTest, MultiplyAsFp32PanelsOnTheWidenedWeights) {
  ASSERT_TRUE(cpuHasF16c()) << "this CPU has no F16C: its fp16 weights run on the tiles";
  int levels = 0;
  for (CpuIsa isa : availableCpuIsas()) {
    if (isa < CpuIsa::kAvx2 || isa == CpuIsa::kAmx)
      continue;
    SCOPED_TRACE(cpuIsaName(isa));
    ASSERT_TRUE(setCpuIsa(isa));
    for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
      SCOPED_TRACE(testing::weightTypeName(type));
      expectHalfPanelsMultiplyAsFp32(type);
    }
    ++levels;
  }
  setCpuIsa(detectedCpuIsa());
  EXPECT_GT(levels, 0) << "this CPU has no level with half panels (avx2 or above)";
}

TEST(CpuIsaTest, LevelsAboveTheDetectedOneAreRefused) {
  const CpuIsa detected = detectedCpuIsa();
  setCpuIsa(CpuIsa::kSse2);
  for (CpuIsa isa :
       {CpuIsa::kSse2, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    EXPECT_EQ(setCpuIsa(isa), isa <= detected) << cpuIsaName(isa);
    // A refused level leaves the previous one (sse2, set below) in place.
    EXPECT_EQ(activeCpuIsa(), isa <= detected ? isa : CpuIsa::kSse2) << cpuIsaName(isa);
    setCpuIsa(CpuIsa::kSse2);
  }
  setCpuIsa(detected);
  EXPECT_EQ(availableCpuIsas().front(), CpuIsa::kSse2);
  EXPECT_EQ(availableCpuIsas().back(), detected);
}

TEST(CpuIsaTest, EnvironmentVariableNamesALevelThisCpuHas) {
  const char *saved = std::getenv("KILN_CPU_ISA");
  const std::string restore = saved ? saved : "";
  ::setenv("KILN_CPU_ISA", "sse2", 1);
  EXPECT_EQ(cpuIsaEnvError(), "");
  ::setenv("KILN_CPU_ISA", "avx3", 1);
  EXPECT_EQ(cpuIsaEnvError(),
            "KILN_CPU_ISA='avx3' is not a level: use sse2, avx2, avx512, avx512bf16 or amx");
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    ::setenv("KILN_CPU_ISA", cpuIsaName(isa), 1);
    if (isa <= detectedCpuIsa())
      EXPECT_EQ(cpuIsaEnvError(), "") << cpuIsaName(isa);
    else
      EXPECT_EQ(cpuIsaEnvError(), std::string("KILN_CPU_ISA=") + cpuIsaName(isa) +
                                      " asks for more than this CPU has (its highest level is " +
                                      cpuIsaName(detectedCpuIsa()) + ")");
  }
  if (saved)
    ::setenv("KILN_CPU_ISA", restore.c_str(), 1);
  else
    ::unsetenv("KILN_CPU_ISA");
}

} // namespace
} // namespace kiln::kernels::cpu
