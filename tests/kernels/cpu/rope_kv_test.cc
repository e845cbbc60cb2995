#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/rope_angles.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

struct RopeShape {
  int32_t numHeads, numKvHeads, headDim, rotaryDim, blockSize;
};

// transformers: inv_freq = 1 / theta^(arange(0, dim, 2) / dim), in fp32.
std::vector<float> llamaInvFreq(int32_t rotaryDim, float theta) {
  std::vector<float> invFreq(rotaryDim / 2);
  for (int32_t i = 0; i < rotaryDim / 2; ++i)
    invFreq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / rotaryDim);
  return invFreq;
}

// Reference rotation: the angle is the fp32 product (as transformers computes it); cos, sin (times
// the attention scaling) and the rotation itself in double.
std::vector<double> rotateReference(const float *x, int32_t position,
                                    const std::vector<float> &invFreq, const RopeShape &s,
                                    double scaling = 1.0) {
  const int32_t half = s.rotaryDim / 2;
  std::vector<double> out(x, x + s.headDim);
  for (int32_t i = 0; i < half; ++i) {
    const double angle = static_cast<float>(position) * invFreq[i];
    const double c = std::cos(angle) * scaling, sn = std::sin(angle) * scaling;
    out[i] = x[i] * c - x[i + half] * sn;
    out[i + half] = x[i + half] * c + x[i] * sn;
  }
  return out;
}

constexpr float kSentinel = -777.25f;
constexpr double kTolerance = 2e-6; // absolute, on values in [-1, 1]

void checkShape(const RopeShape &s, uint32_t seed) {
  const int32_t numTokens = 11;
  const int32_t numBlocks = numTokens + 3; // at least one spare slot per token, even at blockSize 1
  const int64_t qkvWidth = static_cast<int64_t>(s.numHeads + 2 * s.numKvHeads) * s.headDim;
  const auto qkv = randomFloats(numTokens * qkvWidth, seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> positions(numTokens), slots(numBlocks * s.blockSize);
  for (int32_t &p : positions)
    p = std::uniform_int_distribution<int32_t>(0, 8000)(rng);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(numTokens);
  slots[4] = -1; // padding token: rotates q, writes no cache slot
  const auto invFreq = llamaInvFreq(s.rotaryDim, 10000.0f);
  const size_t cacheSize = static_cast<size_t>(numBlocks) * s.numKvHeads * s.blockSize * s.headDim;
  std::vector<float> kCache(cacheSize, kSentinel), vCache(cacheSize, kSentinel);
  std::vector<float> q(static_cast<size_t>(numTokens) * s.numHeads * s.headDim);
  ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(), kCache.data(),
               vCache.data(), numTokens, s.numHeads, s.numKvHeads, s.headDim, s.rotaryDim,
               s.blockSize});

  std::vector<bool> written(cacheSize, false);
  for (int32_t t = 0; t < numTokens; ++t) {
    const float *row = qkv.data() + t * qkvWidth;
    for (int32_t h = 0; h < s.numHeads; ++h) {
      const auto expected = rotateReference(row + h * s.headDim, positions[t], invFreq, s);
      for (int32_t d = 0; d < s.headDim; ++d)
        ASSERT_NEAR(q[(t * s.numHeads + h) * s.headDim + d], expected[d], kTolerance)
            << "q token " << t << " head " << h << " dim " << d;
    }
    if (slots[t] < 0)
      continue;
    const int64_t block = slots[t] / s.blockSize, offset = slots[t] % s.blockSize;
    for (int32_t h = 0; h < s.numKvHeads; ++h) {
      const float *k = row + (s.numHeads + h) * s.headDim;
      const float *v = row + (s.numHeads + s.numKvHeads + h) * s.headDim;
      const auto expectedK = rotateReference(k, positions[t], invFreq, s);
      const int64_t base = ((block * s.numKvHeads + h) * s.blockSize + offset) * s.headDim;
      for (int32_t d = 0; d < s.headDim; ++d) {
        ASSERT_NEAR(kCache[base + d], expectedK[d], kTolerance) << "k token " << t << " dim " << d;
        ASSERT_EQ(vCache[base + d], v[d]) << "v token " << t << " dim " << d;
        written[base + d] = true;
      }
    }
  }
  for (size_t i = 0; i < cacheSize; ++i)
    if (!written[i]) {
      ASSERT_EQ(std::bit_cast<uint32_t>(kCache[i]), std::bit_cast<uint32_t>(kSentinel)) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(vCache[i]), std::bit_cast<uint32_t>(kSentinel)) << i;
    }
}

TEST(RopeKvWriteTest, RotatesAndWritesSlotsOverShapeGrid) {
  const std::pair<int32_t, int32_t> headCounts[] = {{4, 4}, {8, 2}, {4, 1}};
  uint32_t seed = 700;
  for (auto [heads, kvHeads] : headCounts)
    for (int32_t headDim : {8, 16, 32, 64})
      for (int32_t blockSize : {1, 4, 16}) {
        const RopeShape shape{heads, kvHeads, headDim, headDim, blockSize};
        SCOPED_TRACE(::testing::Message() << "heads=" << heads << "/" << kvHeads
                                          << " headDim=" << headDim << " block=" << blockSize);
        checkShape(shape, ++seed);
      }
}

// Partial rotary: only the first rotaryDim dims rotate (pairs i, i + rotaryDim/2); the rest pass.
TEST(RopeKvWriteTest, PartialRotaryLeavesTailDimsUnrotated) {
  for (auto [headDim, rotaryDim] : {std::pair{32, 16}, std::pair{64, 24}}) {
    SCOPED_TRACE(::testing::Message() << "headDim=" << headDim << " rotaryDim=" << rotaryDim);
    checkShape({8, 2, headDim, rotaryDim, 4}, 800 + headDim);
  }
}

TEST(RopeKvWriteTest, PositionZeroIsIdentity) {
  const RopeShape s{2, 1, 8, 8, 2};
  const auto qkv = randomFloats(4 * 8, 900);
  const std::vector<int32_t> positions = {0}, slots = {3};
  const auto invFreq = llamaInvFreq(8, 500000.0f);
  std::vector<float> q(16), kCache(32, 0.0f), vCache(32, 0.0f);
  ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(), kCache.data(),
               vCache.data(), 1, s.numHeads, s.numKvHeads, s.headDim, s.rotaryDim, s.blockSize});
  EXPECT_TRUE(std::equal(q.begin(), q.end(), qkv.begin()));
  // slot 3 = block 1, offset 1 -> floats [24, 32)
  EXPECT_TRUE(std::equal(kCache.begin() + 24, kCache.end(), qkv.begin() + 16));
  EXPECT_TRUE(std::equal(vCache.begin() + 24, vCache.end(), qkv.begin() + 24));
}

// --- Run-time scaling modes -------------------------------------------------------------------

// One sequence's tokens in a step: positions start .. start + count - 1, so its L (length after
// the step) is start + count, unless `length` (a chunk of a longer known prompt) says more.
struct SeqChunk {
  int32_t start, count;
  int32_t length = 0; // > 0: passed as the sequence's sequenceLengths entry
};

// How the reference rotates: the mode's rows and switch, written from the definition (L of the
// chunk, not of the token), independently of the kernel's sequence lookup.
struct ModeCase {
  RopeMode mode;
  std::vector<float> invFreq; // kLongShort: [short | long]
  int32_t originalMax = 0;
  float theta = 10000.0f;
  double factor = 1.0;
  float scaling = 1.0f;
  // Qwen3's per-head norms ([headDim] each, empty: none) and their eps.
  std::vector<float> qNorm, kNorm;
  float qkNormEps = 1e-6f;
};

// Qwen3RMSNorm of one head in double: x / sqrt(mean(x^2) + eps) * w.
std::vector<float> normalizedHead(const float *x, const std::vector<float> &weight, float eps) {
  const size_t n = weight.size();
  double sumSquares = 0;
  for (size_t i = 0; i < n; ++i)
    sumSquares += double(x[i]) * x[i];
  const double inverse = 1.0 / std::sqrt(sumSquares / n + eps);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(weight[i] * (x[i] * inverse));
  return out;
}

std::vector<float> referenceRow(const ModeCase &c, int32_t seqLen, int32_t half) {
  const bool above = c.mode != RopeMode::kStatic && seqLen > c.originalMax;
  if (above && c.mode == RopeMode::kLongShort)
    return {c.invFreq.begin() + half, c.invFreq.begin() + 2 * half};
  std::vector<float> row(c.invFreq.begin(), c.invFreq.begin() + half);
  if (above)
    dynamicNtkInvFreq(c.theta, c.factor, c.originalMax, 2 * half, seqLen, row.data());
  return row;
}

void checkMode(const RopeShape &s, const ModeCase &c, const std::vector<SeqChunk> &chunks,
               uint32_t seed) {
  std::vector<int32_t> positions, queryStartLoc = {0}, seqLenOf, lengths;
  bool anyLength = false;
  for (const SeqChunk &chunk : chunks) {
    const int32_t length = chunk.length > 0 ? chunk.length : chunk.start + chunk.count;
    anyLength = anyLength || chunk.length > 0;
    lengths.push_back(length);
    for (int32_t p = chunk.start; p < chunk.start + chunk.count; ++p) {
      positions.push_back(p);
      seqLenOf.push_back(length);
    }
    queryStartLoc.push_back(static_cast<int32_t>(positions.size()));
  }
  const int32_t numTokens = static_cast<int32_t>(positions.size());
  const int32_t numBlocks = numTokens / s.blockSize + 2;
  std::vector<int32_t> slots(numTokens);
  std::iota(slots.begin(), slots.end(), s.blockSize); // block 0 stays untouched
  const int64_t qkvWidth = static_cast<int64_t>(s.numHeads + 2 * s.numKvHeads) * s.headDim;
  const auto qkv = randomFloats(numTokens * qkvWidth, seed);
  const size_t cacheSize = static_cast<size_t>(numBlocks) * s.numKvHeads * s.blockSize * s.headDim;
  std::vector<float> kCache(cacheSize, kSentinel), vCache(cacheSize, kSentinel);
  std::vector<float> q(static_cast<size_t>(numTokens) * s.numHeads * s.headDim);
  RopeKvWriteArgs args{qkv.data(), positions.data(), slots.data(),  c.invFreq.data(),
                       q.data(),   kCache.data(),    vCache.data(), numTokens,
                       s.numHeads, s.numKvHeads,     s.headDim,     s.rotaryDim,
                       s.blockSize};
  args.mode = c.mode;
  args.queryStartLoc = queryStartLoc.data();
  args.numSeqs = static_cast<int32_t>(chunks.size());
  args.originalMaxPositions = c.originalMax;
  args.ropeTheta = c.theta;
  args.dynamicFactor = c.factor;
  args.attentionScaling = c.scaling;
  if (anyLength)
    args.sequenceLengths = lengths.data();
  if (!c.qNorm.empty()) {
    args.qNorm = c.qNorm.data();
    args.kNorm = c.kNorm.data();
    args.qkNormEps = c.qkNormEps;
  }
  ropeKvWrite(args);

  for (int32_t t = 0; t < numTokens; ++t) {
    SCOPED_TRACE(::testing::Message()
                 << "token " << t << " position " << positions[t] << " L " << seqLenOf[t]);
    const std::vector<float> row = referenceRow(c, seqLenOf[t], s.rotaryDim / 2);
    const float *x = qkv.data() + t * qkvWidth;
    for (int32_t h = 0; h < s.numHeads + s.numKvHeads; ++h) {
      std::vector<float> head(x + h * s.headDim, x + (h + 1) * s.headDim);
      if (!c.qNorm.empty())
        head = normalizedHead(head.data(), h < s.numHeads ? c.qNorm : c.kNorm, c.qkNormEps);
      const auto expected = rotateReference(head.data(), positions[t], row, s, c.scaling);
      const int64_t slot = slots[t];
      const float *got =
          h < s.numHeads ? q.data() + (static_cast<int64_t>(t) * s.numHeads + h) * s.headDim
                         : kCache.data() +
                               ((slot / s.blockSize * s.numKvHeads + h - s.numHeads) * s.blockSize +
                                slot % s.blockSize) *
                                   s.headDim;
      for (int32_t d = 0; d < s.headDim; ++d)
        ASSERT_NEAR(got[d], expected[d], kTolerance) << "head " << h << " dim " << d;
    }
    // v goes to the cache as it is: never normalized or rotated.
    const int64_t slot = slots[t];
    for (int32_t h = 0; h < s.numKvHeads; ++h) {
      const float *v = x + (s.numHeads + s.numKvHeads + h) * s.headDim;
      const float *got =
          vCache.data() +
          ((slot / s.blockSize * s.numKvHeads + h) * s.blockSize + slot % s.blockSize) * s.headDim;
      for (int32_t d = 0; d < s.headDim; ++d)
        ASSERT_EQ(got[d], v[d]) << "v head " << h << " dim " << d;
    }
  }
}

// Sequences on both sides of the switch in one step, and chunks whose first positions lie below
// it while their L lies above (they take the long / scaled row for every token, as transformers
// does for a forward whose max position crosses it).
const std::vector<SeqChunk> kSwitchBatch = {
    {0, 5},   // prefill, L 5
    {40, 8},  // chunk, L 48
    {60, 10}, // chunk 60..69 straddling 64: L 70, above for all of it
    {63, 1},  // decode, L 64: at the switch, not above
    {64, 1},  // decode, L 65: above
    {200, 1}, // decode far above
    {30, 34}, // chunk ending at 63: L 64, below
};

TEST(RopeKvWriteTest, LongShortPicksTheRowOfEachSequence) {
  for (const RopeShape &shape : {RopeShape{4, 2, 16, 16, 4}, RopeShape{4, 2, 32, 16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "rotaryDim " << shape.rotaryDim);
    const int32_t half = shape.rotaryDim / 2;
    ModeCase c{RopeMode::kLongShort, {}, 64};
    const auto base = llamaInvFreq(shape.rotaryDim, 10000.0f);
    for (int32_t row = 0; row < 2; ++row)
      for (int32_t i = 0; i < half; ++i) // short 1..1.1, long 1..8
        c.invFreq.push_back(base[i] / (row == 0 ? 1.0f + 0.1f * i / half : 1.0f + 7.0f * i / half));
    c.scaling = 1.1902381f;
    checkMode(shape, c, kSwitchBatch, 1200 + shape.headDim);
  }
}

TEST(RopeKvWriteTest, DynamicNtkRecomputesAboveMaxPositions) {
  for (const RopeShape &shape : {RopeShape{4, 2, 16, 16, 4}, RopeShape{2, 1, 64, 32, 16}}) {
    SCOPED_TRACE(::testing::Message() << "rotaryDim " << shape.rotaryDim);
    ModeCase c{RopeMode::kDynamicNtk, llamaInvFreq(shape.rotaryDim, 10000.0f), 64, 10000.0f, 2.0};
    std::vector<SeqChunk> batch = kSwitchBatch;
    batch.push_back({4000, 3}); // L 4003: a base 100x larger
    checkMode(shape, c, batch, 1300 + shape.headDim);
    c.factor = 1.7; // factor - 1 is rounded from the double
    checkMode(shape, c, batch, 1400 + shape.headDim);
  }
}

// A chunk of a longer prompt takes the row of the whole prompt (sequenceLengths), not of the
// chunk's end: a prompt rotates alike in one prefill or in chunks.
TEST(RopeKvWriteTest, SequenceLengthsPickTheRowOfTheWholeSequence) {
  const RopeShape shape{4, 2, 16, 16, 4};
  const int32_t half = shape.rotaryDim / 2;
  const std::vector<SeqChunk> batch = {
      {0, 8, 20},  // the first chunk of a 20-token prompt: above the switch at 16
      {8, 8, 20},  // its second chunk
      {0, 6, 16},  // a 16-token prompt's first chunk: at the switch, not above
      {16, 1, 0},  // a decode token without an entry: L 17
      {3, 2, 900}, // far above
  };
  ModeCase longShort{RopeMode::kLongShort, {}, 16};
  const auto base = llamaInvFreq(shape.rotaryDim, 10000.0f);
  for (int32_t row = 0; row < 2; ++row)
    for (int32_t i = 0; i < half; ++i)
      longShort.invFreq.push_back(base[i] / (row == 0 ? 1.0f : 1.0f + 3.0f * i / half));
  checkMode(shape, longShort, batch, 1700);
  ModeCase dynamic{RopeMode::kDynamicNtk, base, 16, 10000.0f, 2.0};
  checkMode(shape, dynamic, batch, 1701);
}

// Qwen3: q and k heads RMS-normalized with their own weights before rotation, v untouched; with
// a run-time mode and attention scaling too.
TEST(RopeKvWriteTest, QkNormNormalizesEachHeadBeforeRotating) {
  for (const RopeShape &shape : {RopeShape{4, 2, 16, 16, 4}, RopeShape{8, 1, 32, 24, 16}}) {
    SCOPED_TRACE(::testing::Message() << "headDim " << shape.headDim);
    ModeCase c{RopeMode::kStatic, llamaInvFreq(shape.rotaryDim, 1000000.0f)};
    std::mt19937 rng(1800 + shape.headDim);
    std::normal_distribution<float> around(1.0f, 0.3f);
    for (int32_t i = 0; i < shape.headDim; ++i) {
      c.qNorm.push_back(around(rng));
      c.kNorm.push_back(around(rng));
    }
    checkMode(shape, c, kSwitchBatch, 1800 + shape.headDim);
    c.mode = RopeMode::kDynamicNtk;
    c.originalMax = 64;
    c.factor = 2.0;
    c.scaling = 1.2f;
    checkMode(shape, c, kSwitchBatch, 1900 + shape.headDim);
  }
}

// yarn: one row, cos and sin scaled; with partial rotary the tail dims pass unscaled.
TEST(RopeKvWriteTest, StaticAttentionScalingScalesCosAndSin) {
  for (const RopeShape &shape : {RopeShape{4, 2, 16, 16, 4}, RopeShape{8, 2, 32, 24, 4}}) {
    SCOPED_TRACE(::testing::Message() << "rotaryDim " << shape.rotaryDim);
    ModeCase c{RopeMode::kStatic, llamaInvFreq(shape.rotaryDim, 1000000.0f)};
    c.scaling = 1.1386294f;
    checkMode(shape, c, kSwitchBatch, 1500 + shape.headDim);
  }
}

// The correctly rounded cosine and sine of an fp32 angle: glibc's double results rounded once.
float roundedCos(float angle) {
  return static_cast<float>(std::cos(static_cast<double>(angle)));
}
float roundedSin(float angle) {
  return static_cast<float>(std::sin(static_cast<double>(angle)));
}

// Unscaled static RoPE is what it was before the modes existed: the fp32 rotation with cos and
// sin as the level computes them (std::cos and std::sin of the fp32 angle; from avx512 up their
// correctly rounded values, rope_angles.h), bit for bit, whatever queryStartLoc says.
TEST(RopeKvWriteTest, StaticWithoutScalingIsBitIdenticalToThePlainRotation) {
  const RopeShape s{4, 2, 32, 24, 4};
  const int32_t numTokens = 5, half = s.rotaryDim / 2;
  const std::vector<int32_t> positions = {0, 7, 8, 9, 5000}, slots = {4, 5, 6, 7, -1};
  const std::vector<int32_t> queryStartLoc = {0, 1, 4, 5};
  const int64_t qkvWidth = static_cast<int64_t>(s.numHeads + 2 * s.numKvHeads) * s.headDim;
  const auto qkv = randomFloats(numTokens * qkvWidth, 1600);
  const auto invFreq = llamaInvFreq(s.rotaryDim, 10000.0f);
  std::vector<float> q(static_cast<size_t>(numTokens) * s.numHeads * s.headDim);
  std::vector<float> kCache(3 * s.numKvHeads * s.blockSize * s.headDim);
  std::vector<float> vCache(kCache.size());
  RopeKvWriteArgs args{qkv.data(),    positions.data(), slots.data(), invFreq.data(), q.data(),
                       kCache.data(), vCache.data(),    numTokens,    s.numHeads,     s.numKvHeads,
                       s.headDim,     s.rotaryDim,      s.blockSize};
  args.queryStartLoc = queryStartLoc.data();
  args.numSeqs = 3;
  args.originalMaxPositions = 1; // ignored by kStatic
  ropeKvWrite(args);
  for (int32_t t = 0; t < numTokens; ++t)
    for (int32_t h = 0; h < s.numHeads; ++h) {
      const float *x = qkv.data() + t * qkvWidth + h * s.headDim;
      const float *got = q.data() + (t * s.numHeads + h) * s.headDim;
      for (int32_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * invFreq[i];
        const bool vector = activeCpuIsa() >= CpuIsa::kAvx2;
        const float c = vector ? roundedCos(angle) : std::cos(angle);
        const float sn = vector ? roundedSin(angle) : std::sin(angle);
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]),
                  std::bit_cast<uint32_t>(x[i] * c + (-x[i + half]) * sn));
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i + half]),
                  std::bit_cast<uint32_t>(x[i + half] * c + x[i] * sn));
      }
      for (int32_t d = s.rotaryDim; d < s.headDim; ++d)
        ASSERT_EQ(got[d], x[d]);
    }
}

// From avx2 up the rotary cosines and sines are computed in double and rounded once
// (kernels/cpu/rope_angles.h), 4 lanes at avx2 and 8 from avx512: the fp32 angles of positions
// 0..32767 with Llama's frequencies at theta 1e4 and 5e5 (128 dimensions), and a count that leaves
// a tail of 3 lanes, give the correctly rounded values, glibc's double cos and sin rounded to fp32
// (glibc's cosf and sinf are within an ulp of them, not always equal: cosf(0.973935) is one ulp
// low). Each level the CPU has runs; the CI machines have avx2.
using CosSinFn = void (*)(const float *, int32_t, float *, float *);
void expectCorrectlyRounded(CosSinFn cosSin, const char *level) {
  int64_t checked = 0;
  for (float theta : {10000.0f, 500000.0f}) {
    const auto invFreq = llamaInvFreq(128, theta);
    for (size_t count : {invFreq.size(), invFreq.size() - 5}) {
      std::vector<float> angles(count), cosines(count), sines(count);
      for (int32_t position = 0; position < 32768; position += count == invFreq.size() ? 1 : 7) {
        for (size_t i = 0; i < count; ++i)
          angles[i] = static_cast<float>(position) * invFreq[i];
        cosSin(angles.data(), int32_t(count), cosines.data(), sines.data());
        for (size_t i = 0; i < count; ++i, ++checked) {
          ASSERT_EQ(std::bit_cast<uint32_t>(cosines[i]),
                    std::bit_cast<uint32_t>(roundedCos(angles[i])))
              << level << ": cos of " << angles[i] << " (position " << position << ")";
          ASSERT_EQ(std::bit_cast<uint32_t>(sines[i]),
                    std::bit_cast<uint32_t>(roundedSin(angles[i])))
              << level << ": sin of " << angles[i] << " (position " << position << ")";
        }
      }
    }
  }
  std::printf("%s: %lld angles, every cosine and sine equal\n", level,
              static_cast<long long>(checked));
}

TEST(RopeKvWriteTest, VectorCosinesAndSinesAreCorrectlyRounded) {
  ASSERT_GE(detectedCpuIsa(), CpuIsa::kAvx2) << "this test needs a CPU with AVX2 and FMA";
  expectCorrectlyRounded(cosSinAvx2, "avx2");
  if (detectedCpuIsa() >= CpuIsa::kAvx512)
    expectCorrectlyRounded(cosSinAvx512, "avx512");
  else
    std::printf("no avx512 level on this CPU: cosSinAvx512 is checked where there is one\n");
}

// In place (cosines == angles), as rope_kv.cc calls them.
TEST(RopeKvWriteTest, VectorCosinesInPlaceEqualTheSeparateOutputs) {
  ASSERT_GE(detectedCpuIsa(), CpuIsa::kAvx2) << "this test needs a CPU with AVX2 and FMA";
  std::vector<float> angles(61);
  for (size_t i = 0; i < angles.size(); ++i)
    angles[i] = 0.37f * static_cast<float>(i * i) - 11.0f;
  std::vector<float> cosines(angles.size()), sines(angles.size()), inPlace = angles,
                                                                   sinesInPlace(angles.size());
  cosSinAvx2(angles.data(), int32_t(angles.size()), cosines.data(), sines.data());
  cosSinAvx2(inPlace.data(), int32_t(inPlace.size()), inPlace.data(), sinesInPlace.data());
  EXPECT_EQ(inPlace, cosines);
  EXPECT_EQ(sinesInPlace, sines);
}

// dynamicNtkInvFreq against the formula evaluated in double: within transformers' float32
// rounding (tests/compiler/import/rope_inv_freq_test.cc checks it against transformers itself).
TEST(RopeKvWriteTest, DynamicNtkInvFreqFollowsTheFormula) {
  for (auto [dim, factor, maxPositions, seqLen] :
       {std::tuple{64, 2.0, 2048, 2049}, std::tuple{128, 1.7, 4096, 131072},
        std::tuple{16, 4.0, 64, 65}, std::tuple{32, 8.0, 1024, 1000000}}) {
    std::vector<float> row(dim / 2);
    dynamicNtkInvFreq(10000.0f, factor, maxPositions, dim, seqLen, row.data());
    const double base =
        10000.0 * std::pow(factor * seqLen / maxPositions - (factor - 1), dim / (dim - 2.0));
    for (int32_t i = 0; i < dim / 2; ++i) {
      const double expected = 1.0 / std::pow(base, 2.0 * i / dim);
      EXPECT_NEAR(row[i], expected, 1e-6 * expected) << dim << " " << seqLen << " pair " << i;
    }
  }
}

} // namespace
} // namespace kiln::kernels::cpu
