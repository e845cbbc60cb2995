#include "runtime/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kiln::rt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
using Floats = std::vector<float>;
using Ids = std::vector<int32_t>;

Floats logs(const Floats &probs) {
  Floats out;
  for (float p : probs)
    out.push_back(std::log(p));
  return out;
}

std::vector<bool> kept(const Floats &logits) {
  std::vector<bool> out;
  for (float l : logits)
    out.push_back(l != -kInf);
  return out;
}

TEST(SamplerTest, TopKKeepsTheKLargestAndTiesWithTheKth) {
  Floats x = {1, 3, 2, 3, 0};
  applyTopK(x, 2);
  EXPECT_EQ(x, (Floats{-kInf, 3, -kInf, 3, -kInf}));
  Floats y = {1, 3, 2, 3, 0};
  applyTopK(y, 3);
  EXPECT_EQ(y, (Floats{-kInf, 3, 2, 3, -kInf}));
  Floats off = {1, 3, 2};
  applyTopK(off, 0);
  applyTopK(off, 3);
  applyTopK(off, -1);
  EXPECT_EQ(off, (Floats{1, 3, 2}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // probs by id: .15 .5 .05 .3
  const Floats base = logs({0.15f, 0.5f, 0.05f, 0.3f});
  Floats a = base;
  applyTopP(a, 0.7f); // .5 (0 before), .3 (.5 before); .15 has .8 before
  EXPECT_EQ(kept(a), (std::vector<bool>{false, true, false, true}));
  Floats b = base;
  applyTopP(b, 0.85f);
  EXPECT_EQ(kept(b), (std::vector<bool>{true, true, false, true}));
  Floats c = base;
  applyTopP(c, 0.45f); // the top token always stays
  EXPECT_EQ(kept(c), (std::vector<bool>{false, true, false, false}));
  Floats d = base;
  applyTopP(d, 1.0f);
  EXPECT_EQ(d, base);
  EXPECT_FLOAT_EQ(a[1], base[1]) << "kept logits are unchanged";
}

TEST(SamplerTest, TopPRunsOnTopKMaskedLogitsAsInVllm) {
  // probs .4 .3 .2 .1; top-k 2 renormalizes to .571 .429, so top-p .5 keeps one token, while
  // top-p .5 alone keeps two.
  Floats both = logs({0.4f, 0.3f, 0.2f, 0.1f});
  applyTopK(both, 2);
  applyTopP(both, 0.5f);
  EXPECT_EQ(kept(both), (std::vector<bool>{true, false, false, false}));
  Floats alone = logs({0.4f, 0.3f, 0.2f, 0.1f});
  applyTopP(alone, 0.5f);
  EXPECT_EQ(kept(alone), (std::vector<bool>{true, true, false, false}));
}

TEST(SamplerTest, TopPWorksPastTheFirstSortedChunk) {
  // 300 equal tokens: p = 0.5 keeps exactly 150 (the first 150 by id on ties).
  Floats x(300, 0.0f);
  applyTopP(x, 0.5f - 1e-4f);
  int keptCount = 0;
  for (float l : x)
    keptCount += l == 0.0f;
  EXPECT_EQ(keptCount, 150);
  EXPECT_EQ(x[149], 0.0f);
  EXPECT_EQ(x[150], -kInf);
}

TEST(SamplerTest, MinPMasksBelowAFractionOfTheTopProbability) {
  const Floats base = logs({0.5f, 0.3f, 0.15f, 0.05f});
  Floats a = base;
  applyMinP(a, 0.4f); // threshold .2
  EXPECT_EQ(kept(a), (std::vector<bool>{true, true, false, false}));
  Floats b = base;
  applyMinP(b, 0.25f); // threshold .125
  EXPECT_EQ(kept(b), (std::vector<bool>{true, true, true, false}));
  Floats c = base;
  applyMinP(c, 0.0f);
  EXPECT_EQ(c, base);
}

TEST(SamplerTest, PenaltiesFollowVllmFormulas) {
  Floats x = {2.0f, -1.0f, 0.5f, 1.0f, -2.0f};
  SamplingParams p;
  p.repetitionPenalty = 2.0f; // prompt and output ids: positive / r, negative * r
  p.frequencyPenalty = 0.5f;  // output only: - f * count
  p.presencePenalty = 0.25f;  // output only: - p if present
  applyPenalties(x, Ids{0, 1}, Ids{2, 2, 3}, p);
  // 0: 2/2; 1: -1*2; 2: .5/2 - 2*.5 - .25; 3: 1/2 - .5 - .25; 4: untouched
  EXPECT_EQ(x, (Floats{1.0f, -2.0f, -1.0f, -0.25f, -2.0f}));
}

TEST(SamplerTest, NegativePenaltiesEncourageRepeats) {
  Floats x = {0.0f, 0.0f};
  SamplingParams p;
  p.frequencyPenalty = -1.0f;
  p.presencePenalty = -0.5f;
  applyPenalties(x, Ids{1}, Ids{0, 0}, p);
  EXPECT_EQ(x, (Floats{2.5f, 0.0f}));
}

TEST(SamplerTest, TemperatureDividesLogits) {
  Floats x = {1.0f, -2.0f};
  applyTemperature(x, 0.5f);
  EXPECT_EQ(x, (Floats{2.0f, -4.0f}));
}

TEST(SamplerTest, LogSoftmaxValues) {
  Floats lp = logSoftmax(Floats{0.0f, std::log(3.0f), -kInf});
  EXPECT_NEAR(lp[0], std::log(0.25), 1e-6);
  EXPECT_NEAR(lp[1], std::log(0.75), 1e-6);
  EXPECT_EQ(lp[2], -kInf);
}

TEST(SamplerTest, GreedyTakesTheLowestIdAmongTies) {
  EXPECT_EQ(argmaxToken(Floats{1, 5, 5, 2}), 1);
  EXPECT_EQ(argmaxToken(Floats{-kInf, -kInf}), -1);
}

TEST(SamplerTest, GreedySamplingHonoursMinTokensSuppression) {
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  const Floats logits = {0.1f, 3.0f, 2.0f};
  Result<SampledToken> free = sampleToken(logits, p, {}, rng);
  ASSERT_TRUE(free.isOk());
  EXPECT_EQ(free->tokenId, 1);
  const Ids eos = {1};
  SamplingHistory history;
  history.suppressedIds = eos;
  Result<SampledToken> suppressed = sampleToken(logits, p, history, rng);
  ASSERT_TRUE(suppressed.isOk());
  EXPECT_EQ(suppressed->tokenId, 2);
}

TEST(SamplerTest, LogprobsAreLogSoftmaxAfterPenaltiesAndTemperature) {
  SamplingParams p;
  p.temperature = 0.5f; // logits {0, ln 3} become {0, 2 ln 3}: probs .1, .9
  p.logprobs = 2;
  p.seed = 3;
  Rng rng(3);
  Result<SampledToken> r = sampleToken(Floats{0.0f, std::log(3.0f)}, p, {}, rng);
  ASSERT_TRUE(r.isOk());
  ASSERT_TRUE(r->logprobs.has_value());
  const TokenLogprobs &lp = *r->logprobs;
  EXPECT_EQ(lp.sampled.tokenId, r->tokenId);
  EXPECT_NEAR(lp.sampled.logprob, r->tokenId == 1 ? std::log(0.9) : std::log(0.1), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].tokenId, 1);
  EXPECT_NEAR(lp.top[0].logprob, std::log(0.9), 1e-6);
  EXPECT_EQ(lp.top[1].tokenId, 0);
  EXPECT_NEAR(lp.top[1].logprob, std::log(0.1), 1e-6);
}

TEST(SamplerTest, LogprobsKeepTokensOutsideTheTopKSet) {
  SamplingParams p;
  p.topK = 1;
  p.logprobs = 3;
  Rng rng(9);
  Result<SampledToken> r = sampleToken(Floats{0.0f, 0.0f, std::log(2.0f)}, p, {}, rng);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->tokenId, 2);
  const TokenLogprobs &lp = *r->logprobs;
  EXPECT_NEAR(lp.sampled.logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(lp.top[1].tokenId, 0);
  EXPECT_NEAR(lp.top[1].logprob, std::log(0.25), 1e-6);
  EXPECT_EQ(lp.top[2].tokenId, 1);
}

TEST(SamplerTest, DrawIsAnInverseCdfOfOneUniform) {
  const Floats logits = logs({0.25f, 0.25f, 0.5f});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng probe(seed), rng(seed);
    const double u = probe.uniform();
    const int32_t expected = u < 0.25 ? 0 : u < 0.5 ? 1 : 2;
    EXPECT_EQ(drawToken(logits, rng), expected) << "seed " << seed << " u " << u;
  }
}

TEST(SamplerTest, SampledFrequenciesMatchProbabilities) {
  SamplingParams p;
  Rng rng(12345);
  const Floats logits = logs({0.1f, 0.2f, 0.7f});
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i)
    counts[sampleToken(logits, p, {}, rng)->tokenId]++;
  EXPECT_NEAR(counts[0] / double(n), 0.1, 0.01);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.01);
  EXPECT_NEAR(counts[2] / double(n), 0.7, 0.01);
}

TEST(SamplerTest, SeededSequencesRepeatExactly) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.topP = 0.9f;
  Floats logits(50);
  for (int i = 0; i < 50; ++i)
    logits[i] = std::sin(i * 1.7f) * 3;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    Ids ids;
    for (int i = 0; i < 64; ++i)
      ids.push_back(sampleToken(logits, p, {}, rng)->tokenId);
    return ids;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  // Each parallel sample draws its own stream.
  Rng a = rngForSample(7, 0), b = rngForSample(7, 1), again = rngForSample(7, 0);
  const uint64_t first = a.next();
  EXPECT_NE(first, b.next());
  EXPECT_EQ(first, again.next());
}

TEST(SamplerTest, NothingToSampleIsAnErrorNotACrash) {
  SamplingParams p;
  Rng rng(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result<SampledToken> r = sampleToken(Floats{nan, nan}, p, {}, rng);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  p.temperature = 0;
  EXPECT_FALSE(sampleToken(Floats{-kInf}, p, {}, rng).isOk());
}

TEST(SamplingParamsTest, ValidationNamesTheFieldAndRange) {
  auto message = [](SamplingParams p) { return validateSamplingParams(p, 100, 20).message(); };
  SamplingParams ok;
  EXPECT_TRUE(validateSamplingParams(ok, 100, 20).isOk());
  SamplingParams p;
  p.topP = 0;
  EXPECT_NE(message(p).find("'top_p' must be in (0, 1]"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(message(p).find("'temperature'"), std::string::npos);
  p = {};
  p.logprobs = 21;
  EXPECT_NE(message(p).find("'logprobs' must be in [0, 20]"), std::string::npos);
  p = {};
  p.maxTokens = 4;
  p.minTokens = 5;
  EXPECT_NE(message(p).find("'min_tokens' must be <= max_tokens (4)"), std::string::npos);
  p = {};
  p.stopTokenIds = {100};
  EXPECT_NE(message(p).find("'stop_token_ids'"), std::string::npos);
  p = {};
  p.repetitionPenalty = 0;
  EXPECT_NE(message(p).find("'repetition_penalty'"), std::string::npos);
  p = {};
  p.presencePenalty = 2.5f;
  EXPECT_NE(message(p).find("'presence_penalty'"), std::string::npos);
  p = {};
  p.n = 0;
  EXPECT_NE(message(p).find("'n'"), std::string::npos);
}

} // namespace
} // namespace kiln::rt
