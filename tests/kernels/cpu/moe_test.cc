// The mixture-of-experts kernel (kernels/cpu/moe.cc) at every instruction-set level of this CPU
// against a double-precision reference: routing (softmax, top k, renormalized or not), each
// expert's SiLU-gated MLP and the weighted sum; a row's result alone equals its result in a batch
// bit for bit; bf16 and quantized expert weights; ties go to the lower expert index.
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::makeWeights;
using testing::randomFloats;

class MoeTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

struct Shape {
  int32_t rows, hidden, inter, experts, k;
  bool renormalize;
};

// y for row r in double, from the weights as stored (widened exactly). `roundAct`: the expert's
// activations rounded to bf16 before the down projection, as the AMX Linear rounds its fp32 input
// for bf16 weights (kernels/cpu/linear_amx.cc).
std::vector<double> reference(const Shape &s, const std::vector<float> &x,
                              const std::vector<float> &logits, const std::vector<float> &gateUp,
                              const std::vector<float> &down, int32_t r, bool roundAct) {
  const int32_t H = s.hidden, I = s.inter, E = s.experts;
  std::vector<double> p(E);
  double maxLogit = *std::max_element(logits.begin() + r * E, logits.begin() + (r + 1) * E);
  double sum = 0;
  for (int32_t e = 0; e < E; ++e)
    sum += (p[e] = std::exp(logits[r * E + e] - maxLogit));
  for (double &v : p)
    v /= sum;
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  double total = 0;
  for (int32_t i = 0; i < s.k; ++i)
    total += p[order[i]];
  std::vector<int32_t> chosen(order.begin(), order.begin() + s.k);
  std::sort(chosen.begin(), chosen.end());
  std::vector<double> y(H, 0.0);
  for (int32_t e : chosen) {
    const double w = s.renormalize ? p[e] / total : p[e];
    std::vector<double> act(I);
    for (int32_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int32_t h = 0; h < H; ++h) {
        g += double(gateUp[(size_t(e) * 2 * I + i) * H + h]) * x[size_t(r) * H + h];
        u += double(gateUp[(size_t(e) * 2 * I + I + i) * H + h]) * x[size_t(r) * H + h];
      }
      act[i] = g / (1 + std::exp(-g)) * u;
      if (roundAct)
        act[i] = bf16ToF32(f32ToBf16(static_cast<float>(act[i])));
    }
    for (int32_t h = 0; h < H; ++h) {
      double o = 0;
      for (int32_t i = 0; i < I; ++i)
        o += double(down[(size_t(e) * H + h) * I + i]) * act[i];
      y[h] += w * o;
    }
  }
  return y;
}

// Every row of `out` (moeExperts(args)) within fp32 rounding of the double reference on the
// weights `gateUp` / `down` stand for, and each row alone the same bits as in the batch.
void checkRows(const Shape &s, const MoeExpertsArgs &args, const std::vector<float> &x,
               const std::vector<float> &logits, const std::vector<float> &gateUp,
               const std::vector<float> &down, const std::vector<float> &out, bool roundAct) {
  for (int32_t r = 0; r < s.rows; ++r) {
    const std::vector<double> want = reference(s, x, logits, gateUp, down, r, roundAct);
    for (int32_t h = 0; h < s.hidden; ++h)
      ASSERT_NEAR(out[size_t(r) * s.hidden + h], want[h], 2e-5 + 1e-5 * std::fabs(want[h]))
          << "row " << r << " dim " << h;
    std::vector<float> alone(s.hidden);
    MoeExpertsArgs one = args;
    one.x = x.data() + size_t(r) * s.hidden;
    one.routerLogits = logits.data() + size_t(r) * s.experts;
    one.out = alone.data();
    one.rows = 1;
    moeExperts(one);
    ASSERT_TRUE(std::equal(alone.begin(), alone.end(), out.begin() + size_t(r) * s.hidden))
        << "row " << r << " differs alone";
  }
}

TEST_P(MoeTest, MatchesDoubleReferenceAndIsBatchInvariant) {
  uint32_t seed = 900;
  for (const Shape &s : {Shape{9, 64, 96, 8, 2, true}, Shape{13, 48, 40, 16, 4, true},
                         Shape{5, 32, 24, 16, 4, false}, Shape{3, 16, 8, 4, 4, true}})
    for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "experts " << s.experts << " top " << s.k << " "
                                        << testing::weightTypeName(type));
      // bf16 weights: x exactly bf16 too (the AMX Linear reads its input as bf16).
      auto x = randomFloats(size_t(s.rows) * s.hidden, ++seed, -1, 1);
      if (type == WeightType::kBF16)
        for (float &v : x)
          v = bf16ToF32(f32ToBf16(v));
      const bool roundAct = type == WeightType::kBF16 && activeCpuIsa() == CpuIsa::kAmx;
      const auto logits = randomFloats(size_t(s.rows) * s.experts, ++seed, -3, 3);
      const auto gateUp = makeWeights(
          randomFloats(size_t(s.experts) * 2 * s.inter * s.hidden, ++seed, -0.3f, 0.3f), type);
      const auto down = makeWeights(
          randomFloats(size_t(s.experts) * s.hidden * s.inter, ++seed, -0.3f, 0.3f), type);
      std::vector<float> out(size_t(s.rows) * s.hidden);
      MoeExpertsArgs args{x.data(), logits.data(), gateUp.data(), down.data(), type, out.data(),
                          s.rows,   s.hidden,      s.inter,       s.experts,   s.k,  s.renormalize};
      moeExperts(args);
      // Packed ahead (as the cpu device does at prepare): the same bits.
      if (size_t bytes = moePackedWeightBytes(type, s.experts, s.hidden, s.inter)) {
        std::vector<uint8_t> packed(bytes + 64);
        void *aligned = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
        packMoeWeights(gateUp.data(), down.data(), type, s.experts, s.hidden, s.inter, aligned);
        std::vector<float> fromPacked(out.size());
        MoeExpertsArgs withPacked = args;
        withPacked.out = fromPacked.data();
        withPacked.packed = aligned;
        moeExperts(withPacked);
        ASSERT_EQ(fromPacked, out) << "packed experts differ";
      }
      checkRows(s, args, x, logits, gateUp.values, down.values, out, roundAct);
    }
}

// Quantized experts (`kiln compile --quantize`): each stacked matrix in the quantized layout, each
// expert read in place as a row slice of it (kernels.h QuantWeight matrixRows / firstRow),
// against the double reference on the weights the bytes stand for; packed (avx512 and up) equals
// read in place, and a row alone equals its row in the batch.
TEST_P(MoeTest, QuantizedExpertsMatchTheReferenceOnTheirWeights) {
  uint32_t seed = 1900;
  const Shape s{11, 64, 96, 8, 2, true};
  struct Form {
    QuantFormat format;
    int32_t gateUpGroup, downGroup;
  };
  for (const Form &f : {Form{QuantFormat::kQ8, 64, 96}, Form{QuantFormat::kQ4, 32, 32},
                        Form{QuantFormat::kQ4Zero, 32, 96}, Form{QuantFormat::kQ8Float, 64, 32},
                        Form{QuantFormat::kQ8FloatF32, 32, 96}}) {
    SCOPED_TRACE(::testing::Message()
                 << quantFormatName(f.format) << " groups " << f.gateUpGroup << "/" << f.downGroup);
    // The random weights reach +-4 (Q8) and +-7 (Q8F): a small x keeps the products near 1, where
    // the tolerance below means fp32 rounding.
    const auto x = randomFloats(size_t(s.rows) * s.hidden, ++seed, -0.1f, 0.1f);
    const auto logits = randomFloats(size_t(s.rows) * s.experts, ++seed, -3, 3);
    const testing::QuantMatrixBytes gateUp = testing::randomQuantized(
        f.format, s.experts * 2 * s.inter, s.hidden, f.gateUpGroup, ++seed);
    const testing::QuantMatrixBytes down =
        testing::randomQuantized(f.format, s.experts * s.hidden, s.inter, f.downGroup, ++seed);
    std::vector<float> out(size_t(s.rows) * s.hidden);
    MoeExpertsArgs args{x.data(),
                        logits.data(),
                        gateUp.bytes.data(),
                        down.bytes.data(),
                        WeightType::kF32,
                        out.data(),
                        s.rows,
                        s.hidden,
                        s.inter,
                        s.experts,
                        s.k,
                        s.renormalize};
    args.gateUpQuant = gateUp.quant;
    args.downQuant = down.quant;
    moeExperts(args);
    checkRows(s, args, x, logits, gateUp.values, down.values, out, /*roundAct=*/false);
    if (size_t bytes = moePackedWeightBytes(WeightType::kF32, s.experts, s.hidden, s.inter,
                                            gateUp.quant, down.quant)) {
      std::vector<uint8_t> packed(bytes + 64);
      void *aligned = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
      packMoeWeights(gateUp.bytes.data(), down.bytes.data(), WeightType::kF32, s.experts, s.hidden,
                     s.inter, aligned, gateUp.quant, down.quant);
      std::vector<float> fromPacked(out.size());
      MoeExpertsArgs withPacked = args;
      withPacked.out = fromPacked.data();
      withPacked.packed = aligned;
      moeExperts(withPacked);
      for (size_t i = 0; i < out.size(); ++i) // panels sum in another order than in place
        ASSERT_NEAR(fromPacked[i], out[i], 2e-5 + 1e-5 * std::fabs(out[i])) << i;
    }
  }
}

// Equal probabilities: the lower expert indices win (torch.topk's order on CPU).
TEST_P(MoeTest, TiesGoToTheLowerExpert) {
  const int32_t H = 4, I = 4, E = 4;
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> gateUp(size_t(E) * 2 * I * H, 0.0f), down(size_t(E) * H * I, 0.0f);
  // Expert e's output is e + 1 in every dim: up = 1 on one input, gate large, down ones.
  for (int32_t e = 0; e < E; ++e)
    for (int32_t i = 0; i < I; ++i) {
      gateUp[(size_t(e) * 2 * I + i) * H] = 100.0f; // gate = 100: silu(100) = 100
      gateUp[(size_t(e) * 2 * I + I + i) * H] = float(e + 1) / (100.0f * I); // up
      for (int32_t h = 0; h < H; ++h)
        down[(size_t(e) * H + h) * I + i] = 1.0f;
    }
  std::vector<float> out(H);
  moeExperts({x.data(), logits.data(), gateUp.data(), down.data(), WeightType::kF32, out.data(), 1,
              H, I, E, 2, true});
  for (int32_t h = 0; h < H; ++h) // experts 0 and 1, half each: (1 + 2) / 2
    EXPECT_NEAR(out[h], 1.5f, 1e-5f) << h;
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, MoeTest, ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

} // namespace
} // namespace kiln::kernels::cpu
