#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/cpu/kernel_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::randomFloats;

// Runs each test at one instruction-set level (the vector loops of kernels/cpu/attention_chunk.h
// differ per level) and puts the detected one back.
class AttentionTest : public ::testing::TestWithParam<CpuIsa> {
protected:
  void SetUp() override { ASSERT_TRUE(setCpuIsa(GetParam())) << cpuIsaName(GetParam()); }
  void TearDown() override { setCpuIsa(detectedCpuIsa()); }
};

struct Shape {
  int32_t numHeads, numKvHeads, headDim, blockSize;
};

struct SeqSpec {
  int32_t contextLen; // cache length after this step
  int32_t newTokens;  // queries this step: positions contextLen - newTokens .. contextLen - 1
};

// A batch of sequences with dense (unpaged) K/V for the reference and the same K/V scattered
// into a paged cache through shuffled, non-contiguous block tables. Unused slots hold NaN so any
// read outside a sequence's causal range poisons the output.
struct PagedBatch {
  Shape shape;
  std::vector<SeqSpec> seqs;
  std::vector<std::vector<float>> denseK, denseV; // per seq: [contextLen][kvHeads][headDim]
  std::vector<float> q, kCache, vCache;
  std::vector<int32_t> positions, queryStartLoc, contextLens, blockTables;
  int32_t maxBlocksPerSeq = 0, numTokens = 0;

  int64_t qWidth() const { return static_cast<int64_t>(shape.numHeads) * shape.headDim; }
};

PagedBatch makeBatch(const Shape &s, const std::vector<SeqSpec> &seqs, uint32_t seed) {
  PagedBatch b{s, seqs};
  std::mt19937 rng(seed);
  int32_t totalBlocks = 0;
  for (const SeqSpec &seq : seqs) {
    const int32_t blocks = (seq.contextLen + s.blockSize - 1) / s.blockSize;
    b.maxBlocksPerSeq = std::max(b.maxBlocksPerSeq, blocks + 1); // +1: padded table rows
    totalBlocks += blocks;
  }
  const int32_t numBlocks = totalBlocks + 5; // spare blocks nobody owns
  std::vector<int32_t> blockIds(numBlocks);
  std::iota(blockIds.begin(), blockIds.end(), 0);
  std::shuffle(blockIds.begin(), blockIds.end(), rng);
  const int64_t kvWidth = static_cast<int64_t>(s.numKvHeads) * s.headDim;
  const size_t cacheSize = static_cast<size_t>(numBlocks) * s.numKvHeads * s.blockSize * s.headDim;
  b.kCache.assign(cacheSize, std::numeric_limits<float>::quiet_NaN());
  b.vCache = b.kCache;
  b.blockTables.assign(seqs.size() * b.maxBlocksPerSeq, -1);
  b.queryStartLoc.push_back(0);
  size_t nextBlock = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqSpec &seq = seqs[i];
    b.denseK.push_back(randomFloats(seq.contextLen * kvWidth, seed + 10 * i + 1));
    b.denseV.push_back(randomFloats(seq.contextLen * kvWidth, seed + 10 * i + 2));
    for (int32_t p = 0; p < seq.contextLen; ++p) {
      if (p % s.blockSize == 0)
        b.blockTables[i * b.maxBlocksPerSeq + p / s.blockSize] = blockIds[nextBlock++];
      const int64_t block = b.blockTables[i * b.maxBlocksPerSeq + p / s.blockSize];
      for (int32_t h = 0; h < s.numKvHeads; ++h) {
        const int64_t base =
            ((block * s.numKvHeads + h) * s.blockSize + p % s.blockSize) * s.headDim;
        std::copy_n(&b.denseK[i][p * kvWidth + h * s.headDim], s.headDim, &b.kCache[base]);
        std::copy_n(&b.denseV[i][p * kvWidth + h * s.headDim], s.headDim, &b.vCache[base]);
      }
    }
    for (int32_t p = seq.contextLen - seq.newTokens; p < seq.contextLen; ++p)
      b.positions.push_back(p);
    b.numTokens += seq.newTokens;
    b.queryStartLoc.push_back(b.numTokens);
    b.contextLens.push_back(seq.contextLen);
  }
  b.q = randomFloats(b.numTokens * b.qWidth(), seed + 999, -2.0f, 2.0f);
  return b;
}

// The first position a query at `position` sees: transformers' sliding-window mask keeps the keys
// with position - key < window; window 0 is plain causal attention.
int32_t windowStart(int32_t position, int32_t window) {
  return window > 0 ? std::max(0, position - window + 1) : 0;
}

// Overwrites with NaN the cached positions that none of a sequence's queries may see through
// `window`, so a kernel that reads (not only one that uses) a key outside the window fails.
void poisonOutsideWindows(PagedBatch &b, int32_t window) {
  const Shape &s = b.shape;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const int32_t seen = windowStart(b.positions[b.queryStartLoc[i]], window);
    for (int32_t p = 0; p < seen; ++p) {
      const int64_t block = b.blockTables[i * b.maxBlocksPerSeq + p / s.blockSize];
      for (int32_t h = 0; h < s.numKvHeads; ++h) {
        const int64_t base =
            ((block * s.numKvHeads + h) * s.blockSize + p % s.blockSize) * s.headDim;
        std::fill_n(&b.kCache[base], s.headDim, std::numeric_limits<float>::quiet_NaN());
        std::fill_n(&b.vCache[base], s.headDim, std::numeric_limits<float>::quiet_NaN());
      }
    }
  }
}

std::vector<float> runAttention(const PagedBatch &b, float scale, int32_t window = 0,
                                float softcap = 0.0f) {
  std::vector<float> out(b.numTokens * b.qWidth(), -1.0f);
  AttentionArgs args{b.q.data(),
                     b.positions.data(),
                     b.queryStartLoc.data(),
                     b.contextLens.data(),
                     b.blockTables.data(),
                     b.maxBlocksPerSeq,
                     b.kCache.data(),
                     b.vCache.data(),
                     out.data(),
                     static_cast<int32_t>(b.seqs.size()),
                     b.numTokens,
                     b.shape.numHeads,
                     b.shape.numKvHeads,
                     b.shape.headDim,
                     b.shape.blockSize,
                     scale};
  args.slidingWindow = window;
  args.logitSoftcap = softcap;
  attention(args);
  return out;
}

// Dense causal (sliding-window when window > 0) attention in double straight from the unpaged K/V,
// compared with an absolute tolerance on outputs bounded by max |v| = 1.
void expectMatchesDense(const PagedBatch &b, const std::vector<float> &out, float scale,
                        double tolerance, int32_t window = 0, double softcap = 0.0) {
  const Shape &s = b.shape;
  const int32_t group = s.numHeads / s.numKvHeads;
  const int64_t kvWidth = static_cast<int64_t>(s.numKvHeads) * s.headDim;
  for (size_t i = 0; i < b.seqs.size(); ++i)
    for (int32_t t = b.queryStartLoc[i]; t < b.queryStartLoc[i + 1]; ++t)
      for (int32_t h = 0; h < s.numHeads; ++h) {
        const float *q = &b.q[t * b.qWidth() + h * s.headDim];
        const int32_t kvHead = h / group, length = b.positions[t] + 1;
        const int32_t first = windowStart(b.positions[t], window);
        std::vector<double> scores(length, -std::numeric_limits<double>::infinity());
        for (int32_t p = first; p < length; ++p) {
          double dot = 0.0;
          for (int32_t d = 0; d < s.headDim; ++d)
            dot += static_cast<double>(q[d]) * b.denseK[i][p * kvWidth + kvHead * s.headDim + d];
          scores[p] = dot * scale;
          if (softcap > 0.0)
            scores[p] = std::tanh(scores[p] / softcap) * softcap;
        }
        const double maxScore = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double &score : scores)
          sum += (score = std::exp(score - maxScore));
        for (int32_t d = 0; d < s.headDim; ++d) {
          double expected = 0.0;
          for (int32_t p = first; p < length; ++p)
            expected += scores[p] / sum * b.denseV[i][p * kvWidth + kvHead * s.headDim + d];
          ASSERT_NEAR(out[t * b.qWidth() + h * s.headDim + d], expected, tolerance)
              << "seq " << i << " token " << t << " head " << h << " dim " << d;
        }
      }
}

// Chunked prefill continuation, decode, full prefill and a one-token sequence in one batch.
const std::vector<SeqSpec> kMixedBatch = {{50, 5}, {20, 1}, {37, 37}, {1, 1}};

TEST_P(AttentionTest, PagedMatchesDenseCausalOverShapeGrid) {
  const std::pair<int32_t, int32_t> headCounts[] = {{4, 4}, {8, 2}, {4, 1}};
  uint32_t seed = 1000;
  for (auto [heads, kvHeads] : headCounts)
    for (int32_t headDim : {8, 16, 32, 64})
      for (int32_t blockSize : {1, 4, 16}) {
        SCOPED_TRACE(::testing::Message() << "heads=" << heads << "/" << kvHeads
                                          << " headDim=" << headDim << " block=" << blockSize);
        const PagedBatch b = makeBatch({heads, kvHeads, headDim, blockSize}, kMixedBatch, ++seed);
        const float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
        // fp32 dots, exp and online-softmax rescaling on scores of magnitude < 4.
        expectMatchesDense(b, runAttention(b, scale), scale, 2e-6);
      }
}

// Gemma 2's soft-capped scores, tanh(s / c) * c, with caps that bite (scores reach ~4 x the
// smallest), windowed and not, including head sizes the 16-lane and AMX paths would take; and a
// cap that changes nothing measurable (c far above every score) equals no cap within tolerance.
TEST_P(AttentionTest, SoftcappedScoresMatchDense) {
  uint32_t seed = 3000;
  for (float softcap : {1.0f, 2.5f, 50.0f})
    for (int32_t window : {0, 6})
      for (int32_t headDim : {16, 32, 256}) {
        SCOPED_TRACE(::testing::Message()
                     << "softcap=" << softcap << " window=" << window << " headDim=" << headDim);
        const PagedBatch b = makeBatch({4, 2, headDim, 16}, kMixedBatch, ++seed);
        const float scale = 4.0f / std::sqrt(static_cast<float>(headDim)); // scores up to ~16
        expectMatchesDense(b, runAttention(b, scale, window, softcap), scale, 5e-6, window,
                           softcap);
      }
}

// Long context with blocks larger than the kernel's internal chunk and peaked scores, so the
// online-softmax rescaling runs many times with large corrections.
TEST_P(AttentionTest, LongContextWithLargeBlocksAndSharpScores) {
  for (int32_t blockSize : {16, 64, 100}) {
    SCOPED_TRACE(::testing::Message() << "block=" << blockSize);
    const PagedBatch b = makeBatch({8, 2, 32, blockSize}, {{700, 3}, {333, 1}}, 77 + blockSize);
    // Scores reach ~20, where one fp32 ulp (2e-6) already moves a softmax weight by 2e-6.
    expectMatchesDense(b, runAttention(b, 1.0f), 1.0f, 1e-5);
  }
}

// The batch of one of b's sequences alone, with that sequence's block table.
PagedBatch sequenceAlone(const PagedBatch &b, size_t i) {
  PagedBatch alone = b;
  const int32_t begin = b.queryStartLoc[i], end = b.queryStartLoc[i + 1];
  alone.seqs = {b.seqs[i]};
  alone.numTokens = end - begin;
  alone.q.assign(b.q.begin() + begin * b.qWidth(), b.q.begin() + end * b.qWidth());
  alone.positions.assign(b.positions.begin() + begin, b.positions.begin() + end);
  alone.queryStartLoc = {0, alone.numTokens};
  alone.contextLens = {b.contextLens[i]};
  alone.blockTables.assign(b.blockTables.begin() + i * b.maxBlocksPerSeq,
                           b.blockTables.begin() + (i + 1) * b.maxBlocksPerSeq);
  return alone;
}

// The engine relies on batch invariance: a sequence's attention output must be bit-identical
// whether it is computed alone or batched with others.
void expectBatchInvariant(const PagedBatch &b, float scale, int32_t window) {
  const auto batched = runAttention(b, scale, window);
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const auto single = runAttention(sequenceAlone(b, i), scale, window);
    const int32_t begin = b.queryStartLoc[i], end = b.queryStartLoc[i + 1];
    const std::vector<float> slice(batched.begin() + begin * b.qWidth(),
                                   batched.begin() + end * b.qWidth());
    EXPECT_TRUE(testing::bitwiseEqual(single, slice)) << "sequence " << i;
  }
}

TEST_P(AttentionTest, SequenceOutputIsBitIdenticalAloneAndBatched) {
  for (int32_t blockSize : {1, 4, 16}) {
    SCOPED_TRACE(::testing::Message() << "block=" << blockSize);
    const PagedBatch b = makeBatch({8, 2, 32, blockSize}, kMixedBatch, 2000 + blockSize);
    expectBatchInvariant(b, 1.0f / std::sqrt(32.0f), /*window=*/0);
  }
}

// Sliding window (Mistral, Phi-3): prefill, decode, a chunk after cached positions and a chunk
// crossing block boundaries (what a prefix-cache hit also looks like), one batch.
const std::vector<SeqSpec> kWindowBatch = {{50, 5}, {20, 1}, {37, 37}, {1, 1}, {90, 20}, {64, 1}};

// Windows of 1, below, at and above the block size, and covering every context (90 is the
// longest: its last token sees everything, shorter sequences see everything everywhere).
std::vector<int32_t> windowsFor(int32_t blockSize) {
  std::vector<int32_t> windows = {
      1, blockSize - 1, blockSize, blockSize + 1, 2 * blockSize + 3, 33, 90, 1000};
  std::sort(windows.begin(), windows.end());
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  windows.erase(std::remove(windows.begin(), windows.end(), 0), windows.end());
  return windows;
}

TEST_P(AttentionTest, SlidingWindowMatchesDenseOverShapeGrid) {
  const std::pair<int32_t, int32_t> headCounts[] = {{4, 4}, {8, 2}};
  uint32_t seed = 3000;
  for (auto [heads, kvHeads] : headCounts)
    for (int32_t headDim : {8, 32})
      for (int32_t blockSize : {1, 4, 16})
        for (int32_t window : windowsFor(blockSize)) {
          SCOPED_TRACE(::testing::Message()
                       << "heads=" << heads << "/" << kvHeads << " headDim=" << headDim
                       << " block=" << blockSize << " window=" << window);
          PagedBatch b = makeBatch({heads, kvHeads, headDim, blockSize}, kWindowBatch, ++seed);
          poisonOutsideWindows(b, window);
          const float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
          expectMatchesDense(b, runAttention(b, scale, window), scale, 2e-6, window);
        }
}

// Windows longer than the kernel's internal chunk, starting inside large blocks, with peaked
// scores; and window 1, whose output is the token's own value row exactly.
TEST_P(AttentionTest, SlidingWindowLongContextWithLargeBlocks) {
  for (int32_t blockSize : {16, 64, 100})
    for (int32_t window : {1, 33, 100, 250}) {
      SCOPED_TRACE(::testing::Message() << "block=" << blockSize << " window=" << window);
      PagedBatch b = makeBatch({8, 2, 32, blockSize}, {{700, 3}, {333, 1}, {260, 60}},
                               4000 + blockSize + window);
      poisonOutsideWindows(b, window);
      expectMatchesDense(b, runAttention(b, 1.0f, window), 1.0f, 1e-5, window);
    }
}

// A window at least as long as every context is full causal attention, bit for bit.
TEST_P(AttentionTest, WindowCoveringTheContextIsFullAttention) {
  for (int32_t blockSize : {1, 4, 16}) {
    SCOPED_TRACE(::testing::Message() << "block=" << blockSize);
    const PagedBatch b = makeBatch({8, 2, 32, blockSize}, kWindowBatch, 5000 + blockSize);
    const auto full = runAttention(b, 0.25f);
    EXPECT_TRUE(testing::bitwiseEqual(runAttention(b, 0.25f, 90), full));
    EXPECT_TRUE(testing::bitwiseEqual(runAttention(b, 0.25f, 1 << 30), full));
  }
}

TEST_P(AttentionTest, SlidingWindowOutputIsBitIdenticalAloneAndBatched) {
  for (int32_t blockSize : {1, 4, 16})
    for (int32_t window : {1, 3, 16, 40}) {
      SCOPED_TRACE(::testing::Message() << "block=" << blockSize << " window=" << window);
      const PagedBatch b = makeBatch({8, 2, 32, blockSize}, kWindowBatch, 6000 + blockSize);
      expectBatchInvariant(b, 1.0f / std::sqrt(32.0f), window);
    }
}

// The batch of one token of b's single sequence: its decode step, the cache as it is.
PagedBatch tokenAlone(const PagedBatch &b, int32_t t) {
  PagedBatch one = b;
  one.seqs = {{b.positions[t] + 1, 1}};
  one.numTokens = 1;
  one.q.assign(b.q.begin() + t * b.qWidth(), b.q.begin() + (t + 1) * b.qWidth());
  one.positions = {b.positions[t]};
  one.queryStartLoc = {0, 1};
  one.contextLens = {b.positions[t] + 1};
  return one;
}

// A prompt's attention computed at once (prefill: work items of many (token, head) pairs) and token
// by token (decode: items of one token's heads) is bit-identical. From the AVX2 level up the two
// put different things on the vector lanes (kernels/cpu/attention_f32_avx2.cc and
// attention_f32_avx512.cc: pairs, or positions for items of a few pairs) and must still do the same
// arithmetic per pair.
TEST_P(AttentionTest, PromptAtOnceIsBitIdenticalToTokenByToken) {
  const std::pair<int32_t, int32_t> headCounts[] = {{4, 4}, {9, 3}, {8, 2}, {16, 1}};
  uint32_t seed = 7000;
  for (auto [heads, kvHeads] : headCounts)
    for (int32_t headDim : {32, 64})
      for (int32_t blockSize : {16, 32})
        for (int32_t window : {0, 20}) {
          SCOPED_TRACE(::testing::Message()
                       << "heads=" << heads << "/" << kvHeads << " headDim=" << headDim
                       << " block=" << blockSize << " window=" << window);
          const PagedBatch b = makeBatch({heads, kvHeads, headDim, blockSize}, {{45, 45}}, ++seed);
          const float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
          const auto atOnce = runAttention(b, scale, window);
          for (int32_t t = 0; t < b.numTokens; ++t) {
            const std::vector<float> row(atOnce.begin() + t * b.qWidth(),
                                         atOnce.begin() + (t + 1) * b.qWidth());
            ASSERT_TRUE(testing::bitwiseEqual(runAttention(tokenAlone(b, t), scale, window), row))
                << "token " << t;
          }
        }
}

INSTANTIATE_TEST_SUITE_P(EveryLevelOfThisCpu, AttentionTest,
                         ::testing::ValuesIn(availableCpuIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa> &info) {
                           return std::string(cpuIsaName(info.param));
                         });

} // namespace
} // namespace kiln::kernels::cpu
