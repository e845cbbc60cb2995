// Turns one row of logits into a token for one sequence. The order follows vLLM v1: suppress stop
// ids below min_tokens -> penalties -> (greedy: argmax) -> temperature -> min-p -> top-k -> top-p
// -> draw from the sequence's own RNG. Each step is a free function so tests can pin its values.
//
// Logprobs are the log-softmax of the *processed* logits: after suppression, penalties and
// temperature (greedy: no temperature), before the truncation masks (min-p, top-k, top-p), so
// alternatives outside the sampling set keep finite values.
#pragma once

#include "runtime/base/status.h"
#include "runtime/sampling/rng.h"
#include "runtime/sampling/sampling_params.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kiln::rt {

struct TokenLogprob {
  int32_t tokenId = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top; // highest first, ties by lower id; size = requested N
};

// What a sequence has seen so far, for penalties and min_tokens.
struct SamplingHistory {
  std::span<const int32_t> promptIds;
  std::span<const int32_t> outputIds;
  // Ids masked out this step (the stop ids while outputIds.size() < min_tokens).
  std::span<const int32_t> suppressedIds;
  // A constraint's tokens for this step (runtime/structured): 1 allowed, 0 masked; empty: every
  // token. Applied first, with the suppression, so penalties and logprobs see the masked row.
  std::span<const uint8_t> allowedMask;
};

struct SampledToken {
  int32_t tokenId = 0;
  std::optional<TokenLogprobs> logprobs;
};

// The error when no token is left to sample among `candidates` logits (all NaN, -inf or masked).
Status noTokenLeftError(size_t candidates);

// Fails (never crashes) when no token is left to sample, e.g. all logits NaN or masked.
Result<SampledToken> sampleToken(std::span<const float> logits, const SamplingParams &params,
                                 const SamplingHistory &history, Rng &rng);

// --- Individual steps (mutate `logits` in place) ---
void suppressTokens(std::span<float> logits, std::span<const int32_t> tokenIds);
// Masks every token whose entry in `allowed` is 0 (nothing when `allowed` is empty).
void applyAllowedMask(std::span<float> logits, std::span<const uint8_t> allowed);
// repetition: for ids in prompt or output, l > 0 ? l / r : l * r; frequency: l -= f * count in
// output; presence: l -= p if in output.
void applyPenalties(std::span<float> logits, std::span<const int32_t> promptIds,
                    std::span<const int32_t> outputIds, const SamplingParams &params);
void applyTemperature(std::span<float> logits, float temperature);
// Masks tokens whose probability is below minP * (largest probability).
void applyMinP(std::span<float> logits, float minP);
// Masks logits below the k-th largest (ties with it are kept).
void applyTopK(std::span<float> logits, int32_t k);
// Keeps the smallest highest-probability set whose mass reaches p: a token stays when the mass of
// the tokens ranked above it is below p (the top token always stays).
void applyTopP(std::span<float> logits, float p);

std::vector<float> logSoftmax(std::span<const float> logits);
// Lowest id among the largest finite logits; -1 when none is finite.
int32_t argmaxToken(std::span<const float> logits);
// Inverse-CDF draw over softmax(logits) in id order with one rng.uniform(); -1 when none finite.
int32_t drawToken(std::span<const float> logits, Rng &rng);
TokenLogprobs collectLogprobs(std::span<const float> logprobs, int32_t sampledId, int32_t topN);

} // namespace kiln::rt
