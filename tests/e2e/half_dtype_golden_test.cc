// kiln compile --dtype bf16|fp16 run on the cpu backend against transformers running the same
// checkpoint in that dtype (tests/data/golden/<model>.<dtype>.json, made by
// tools/goldens/make_half_goldens.py): logits at every prompt position and 16 teacher-forced
// greedy steps, in staggered batches mixing prefill and decode.
//
// 1. Against transformers-D. The engines round at different points: transformers rounds inside
//    ops (cos/sin, q*k^T, silu before the product, the norm before its weight, norm weights cast
//    to D, its logits), kiln computes each op in fp32 and rounds its output once and returns fp32
//    logits. So they cannot agree to fp32 precision, and kiln-D is NOT closer to transformers-D
//    than kiln-fp32 is (measured: about as far, e.g. tiny-llama bf16 0.23 vs 0.25 max, 0.020 vs
//    0.019 RMS): transformers' own D noise is larger than kiln's. The tolerances are the largest
//    difference measured over the four models plus about 50%: bf16 0.23 -> 0.35, fp16
//    0.0265 -> 0.04.
// 2. So that a real rounding bug cannot pass, the bf16 fixtures are also checked against the
//    "kiln rounding" reference: transformers' fp32 model with its outputs rounded exactly where
//    plan.fbs says kiln rounds (make_half_goldens.py KilnRounding). bf16's rounding moves every
//    row of that reference by >= 0.026 from fp32 (asserted: > 0.02), yet kiln-bf16 reproduces it
//    to fp32 accumulation noise (<= 1e-4) on at least 70% of the rows (measured 79-97%); the other
//    rows follow an occasional bf16 rounding flip caused by a different fp32 summation order and
//    stay within 0.15 (measured 0.10). A missing, extra or wrong rounding anywhere would move
//    every row by about the rounding effect itself.
// 3. So that fp32 math cannot pass as D. The fp16 tolerance cannot tell them apart, and no
//    tighter one could: kiln-fp32 is within 0.0156-0.0194 of transformers-fp16, kiln-fp16 itself
//    0.0195-0.0267 (measured over the four models). So every row of kiln-D must also differ from
//    kiln-fp32 by more than kFp16Effect / kBf16Effect: rounding to D moves each row by at least
//    0.0027-0.0043 (fp16) and 0.026-0.033 (bf16), measured, while the same math in fp32 differs
//    only by summation order (<= kReproduced = 1e-4, or not at all with the same kernels). The
//    thresholds are about half the smallest measured effect, 15x (fp16) and 130x (bf16) that
//    fp32 noise.
//
// Greedy ids: a step's id must equal transformers' where its recorded top-1/top-2 margin exceeds
// twice the tolerance (either logit may move by the tolerance); the other steps are counted and
// reported, not asserted.
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/half_dtype_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace kiln::e2e {
namespace {

constexpr float kBf16Tolerance = 0.35f;
constexpr float kFp16Tolerance = 0.04f;
constexpr float kRoundingEffect = 0.02f;    // min row distance of the reference from fp32
constexpr float kReproduced = 1e-4f;        // a row reproduced up to fp32 summation order
constexpr double kReproducedFraction = 0.7; // of the rows
constexpr float kAfterFlip = 0.15f;         // the worst row after a rounding flip
constexpr float kFp16Effect = 0.0015f;      // min row distance of kiln-fp16 from kiln-fp32
constexpr float kBf16Effect = 0.013f;       // the same for bf16

struct Comparison {
  float halfVsHf = 0, fp32VsHf = 0, hfVsFp32 = 0;
  double halfSq = 0, fp32Sq = 0;
  size_t count = 0;
  int checked = 0, matched = 0, steps = 0, uncheckedMatched = 0;
  int refRows = 0, reproduced = 0;
  float refWorst = 0, refGap = INFINITY;
  float halfVsFp32 = INFINITY; // the smallest row distance of kiln-D from kiln-fp32
};

std::vector<std::vector<float>> runCompiled(const HalfGolden &golden, const std::string &dtype) {
  compiler::CompileOptions options;
  options.dtype = dtype;
  options.maxBatch = 4;
  options.maxSeqLen = 64;
  LoadedArtifact loaded = loadForTest(compileForTest(golden.modelDir, options), 64);
  EXPECT_NE(loaded.executor, nullptr);
  if (!loaded.executor)
    return {};
  EXPECT_EQ(loaded.artifact->plan().activation_dtype(), dtype == "bf16"   ? schema::DType::BF16
                                                        : dtype == "fp16" ? schema::DType::F16
                                                                          : schema::DType::F32);
  return runTeacherForced(*loaded.executor, golden);
}

void compareGreedy(const HalfGolden &golden, size_t index, const std::vector<float> &rows,
                   float tolerance, Comparison &c) {
  const HalfGoldenCase &gc = golden.cases[index];
  const int32_t vocab = golden.vocabSize;
  const size_t prompt = gc.promptIds.size();
  for (size_t k = 0; k < gc.greedyIds.size(); ++k) {
    const int32_t id = argmax(rows.data() + (prompt - 1 + k) * vocab, vocab);
    ++c.steps;
    if (gc.greedyMargins[k] > 2 * tolerance) {
      ++c.checked;
      c.matched += id == gc.greedyIds[k];
      EXPECT_EQ(id, gc.greedyIds[k])
          << golden.model << " " << golden.dtype << " case " << index << " greedy step " << k
          << " (margin " << gc.greedyMargins[k] << ")";
    } else {
      c.uncheckedMatched += id == gc.greedyIds[k];
    }
  }
}

// Row by row against the kiln-rounding reference (see the file comment).
void compareRoundingReference(const HalfGoldenCase &gc, int32_t vocab,
                              const std::vector<float> &half, const std::vector<float> &fp32,
                              size_t index, Comparison &c) {
  for (int32_t r = 0; r < gc.rows; ++r) {
    const size_t at = size_t(r) * vocab;
    const float kiln = maxAbsDiffOf(half.data() + at, gc.kilnRounding.data() + at, vocab);
    const float effect = maxAbsDiffOf(fp32.data() + at, gc.kilnRounding.data() + at, vocab);
    EXPECT_GT(effect, kRoundingEffect) << "case " << index << " row " << r;
    EXPECT_LE(kiln, kAfterFlip) << "case " << index << " row " << r;
    ++c.refRows;
    c.reproduced += kiln <= kReproduced;
    c.refWorst = std::max(c.refWorst, kiln);
    c.refGap = std::min(c.refGap, effect);
  }
}

void report(const std::string &model, const std::string &dtype, float tolerance,
            const Comparison &c) {
  std::cout << model << " " << dtype << ": max |kiln - transformers| " << c.halfVsHf
            << " (tolerance " << tolerance << "), RMS " << std::sqrt(c.halfSq / c.count)
            << "; kiln fp32 vs transformers " << dtype << ": max " << c.fp32VsHf << ", RMS "
            << std::sqrt(c.fp32Sq / c.count) << "; transformers " << dtype << " vs fp32 max "
            << c.hfVsFp32 << "; greedy ids: " << c.matched << "/" << c.checked
            << " asserted steps match, " << c.uncheckedMatched << "/" << (c.steps - c.checked)
            << " near-tie steps match; kiln " << dtype
            << " vs kiln fp32: every row >= " << c.halfVsFp32 << " (asserted > "
            << (dtype == "bf16" ? kBf16Effect : kFp16Effect) << ")";
  if (c.refRows)
    std::cout << "; kiln-rounding reference: " << c.reproduced << "/" << c.refRows
              << " rows within " << kReproduced << ", worst " << c.refWorst
              << ", rounding effect >= " << c.refGap;
  std::cout << "\n";
}

void checkHalfGolden(const std::string &model, const std::string &dtype, float tolerance = 0) {
  if (tolerance == 0)
    tolerance = dtype == "bf16" ? kBf16Tolerance : kFp16Tolerance;
  const float halfEffect = dtype == "bf16" ? kBf16Effect : kFp16Effect;
  std::string skipReason;
  std::optional<HalfGolden> golden = loadHalfGolden(model, dtype, skipReason);
  if (!golden) {
    if (!skipReason.empty())
      GTEST_SKIP() << skipReason;
    FAIL() << "cannot read the " << dtype << " golden of " << model;
  }
  std::vector<std::vector<float>> half = runCompiled(*golden, dtype);
  std::vector<std::vector<float>> fp32 = runCompiled(*golden, "fp32");
  ASSERT_EQ(half.size(), golden->cases.size());
  ASSERT_EQ(fp32.size(), golden->cases.size());
  const int32_t vocab = golden->vocabSize;
  Comparison c;
  for (size_t i = 0; i < golden->cases.size(); ++i) {
    const HalfGoldenCase &gc = golden->cases[i];
    const size_t count = size_t(gc.rows) * vocab;
    ASSERT_EQ(half[i].size(), count) << "case " << i;
    ASSERT_EQ(fp32[i].size(), count) << "case " << i;
    for (int32_t r = 0; r < gc.rows; ++r) {
      const size_t at = size_t(r) * vocab;
      const float d = maxAbsDiffOf(half[i].data() + at, gc.logits.data() + at, vocab);
      EXPECT_LE(d, tolerance) << model << " " << dtype << " case " << i << " row " << r;
      c.halfVsHf = std::max(c.halfVsHf, d);
      const float fromFp32 = maxAbsDiffOf(half[i].data() + at, fp32[i].data() + at, vocab);
      EXPECT_GT(fromFp32, halfEffect) << model << " " << dtype << " case " << i << " row " << r
                                      << " is kiln fp32's: was it rounded to " << dtype << "?";
      c.halfVsFp32 = std::min(c.halfVsFp32, fromFp32);
    }
    for (size_t e = 0; e < count; ++e) {
      c.halfSq += double(half[i][e] - gc.logits[e]) * (half[i][e] - gc.logits[e]);
      c.fp32Sq += double(fp32[i][e] - gc.logits[e]) * (fp32[i][e] - gc.logits[e]);
    }
    c.count += count;
    c.fp32VsHf = std::max(c.fp32VsHf, maxAbsDiffOf(fp32[i].data(), gc.logits.data(), count));
    c.hfVsFp32 = std::max(c.hfVsFp32, gc.hfHalfVsFp32);
    compareGreedy(*golden, i, half[i], tolerance, c);
    if (!gc.kilnRounding.empty())
      compareRoundingReference(gc, vocab, half[i], fp32[i], i, c);
  }
  if (c.refRows)
    EXPECT_GE(c.reproduced, kReproducedFraction * c.refRows)
        << "kiln " << dtype << " reproduces too few rows of the kiln-rounding reference";
  report(model, dtype, tolerance, c);
}

TEST(HalfDtypeGolden, TinyLlamaBf16) {
  checkHalfGolden("tiny-llama", "bf16");
}
TEST(HalfDtypeGolden, TinyLlamaFp16) {
  checkHalfGolden("tiny-llama", "fp16");
}
TEST(HalfDtypeGolden, TinyLlamaTiedBf16) {
  checkHalfGolden("tiny-llama-tied", "bf16");
}
TEST(HalfDtypeGolden, TinyLlamaTiedFp16) {
  checkHalfGolden("tiny-llama-tied", "fp16");
}
TEST(HalfDtypeGolden, TinyLlama3Bf16) {
  checkHalfGolden("tiny-llama3", "bf16");
}
TEST(HalfDtypeGolden, TinyLlama3Fp16) {
  checkHalfGolden("tiny-llama3", "fp16");
}
// Gemma 2 in bf16 (eager attention in transformers: its soft-capping). No kiln-rounding reference
// (make_half_goldens.py's is Llama's), so parts 1 and 3 of the file comment decide. Measured:
// kiln-bf16 within 0.354 of transformers-bf16 (kiln-fp32: 0.298; transformers' own bf16 is 0.298
// from its fp32), so 0.5 here; every row of kiln-bf16 >= 0.077 from kiln-fp32 (asserted > 0.013:
// an artifact that never rounded to bf16 fails there, 6x below the smallest measured effect).
TEST(HalfDtypeGolden, TinyGemma2Bf16) {
  checkHalfGolden("tiny-gemma2", "bf16", 0.5f);
}
TEST(HalfDtypeGolden, TinyStories656KBf16) {
  checkHalfGolden("tinystories-656K", "bf16");
}
TEST(HalfDtypeGolden, TinyStories656KFp16) {
  checkHalfGolden("tinystories-656K", "fp16");
}

} // namespace
} // namespace kiln::e2e
