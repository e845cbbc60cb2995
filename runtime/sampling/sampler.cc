#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kiln::rt {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

bool inVocab(int32_t id, size_t vocab) {
  return id >= 0 && static_cast<size_t>(id) < vocab;
}

float maxFinite(std::span<const float> logits) {
  float best = kMasked;
  for (float l : logits)
    if (std::isfinite(l) && l > best)
      best = l;
  return best;
}

} // namespace

void suppressTokens(std::span<float> logits, std::span<const int32_t> tokenIds) {
  for (int32_t id : tokenIds)
    if (inVocab(id, logits.size()))
      logits[id] = kMasked;
}

void applyPenalties(std::span<float> logits, std::span<const int32_t> promptIds,
                    std::span<const int32_t> outputIds, const SamplingParams &params) {
  if (params.repetitionPenalty != 1.0f) {
    std::vector<int32_t> seen(promptIds.begin(), promptIds.end());
    seen.insert(seen.end(), outputIds.begin(), outputIds.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const float r = params.repetitionPenalty;
    for (int32_t id : seen) {
      if (!inVocab(id, logits.size()))
        continue;
      float &l = logits[id];
      l = l > 0 ? l / r : l * r;
    }
  }
  if (params.frequencyPenalty == 0.0f && params.presencePenalty == 0.0f)
    return;
  std::vector<int32_t> out(outputIds.begin(), outputIds.end());
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size();) {
    size_t j = i;
    while (j < out.size() && out[j] == out[i])
      ++j;
    if (inVocab(out[i], logits.size()))
      logits[out[i]] -=
          params.frequencyPenalty * static_cast<float>(j - i) + params.presencePenalty;
    i = j;
  }
}

void applyTemperature(std::span<float> logits, float temperature) {
  if (temperature == 1.0f)
    return;
  for (float &l : logits)
    l /= temperature;
}

void applyMinP(std::span<float> logits, float minP) {
  if (minP <= 0.0f)
    return;
  // p_i < minP * p_max  <=>  l_i < l_max + log(minP): no softmax needed.
  const float threshold = maxFinite(logits) + std::log(minP);
  for (float &l : logits)
    if (!(l >= threshold))
      l = kMasked;
}

void applyTopK(std::span<float> logits, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= logits.size())
    return;
  std::vector<float> values(logits.begin(), logits.end());
  for (float &v : values)
    if (std::isnan(v))
      v = kMasked;
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[k - 1];
  for (float &l : logits)
    if (!(l >= kth))
      l = kMasked;
}

void applyTopP(std::span<float> logits, float p) {
  if (p >= 1.0f)
    return;
  const float top = maxFinite(logits);
  if (!std::isfinite(top))
    return;
  std::vector<int32_t> ids;
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) {
      ids.push_back(static_cast<int32_t>(i));
      total += std::exp(static_cast<double>(logits[i]) - top);
    }
  }
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  // Sort only as far as needed: the kept set is usually a small head of the distribution.
  size_t sorted = std::min<size_t>(64, ids.size());
  for (;;) {
    std::partial_sort(ids.begin(), ids.begin() + sorted, ids.end(), higher);
    double mass = 0;
    size_t keep = 0;
    while (keep < sorted && mass < p) {
      mass += std::exp(static_cast<double>(logits[ids[keep]]) - top) / total;
      ++keep;
    }
    if (mass >= p || sorted == ids.size()) {
      for (size_t i = keep; i < ids.size(); ++i)
        logits[ids[i]] = kMasked;
      return;
    }
    sorted = std::min(ids.size(), sorted * 4);
  }
}

std::vector<float> logSoftmax(std::span<const float> logits) {
  std::vector<float> out(logits.size(), kMasked);
  const float top = maxFinite(logits);
  if (!std::isfinite(top))
    return out;
  double sum = 0;
  for (float l : logits)
    if (std::isfinite(l))
      sum += std::exp(static_cast<double>(l) - top);
  const double logSum = std::log(sum) + top;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i]))
      out[i] = static_cast<float>(logits[i] - logSum);
  return out;
}

int32_t argmaxToken(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i]) && (best < 0 || logits[i] > logits[best]))
      best = static_cast<int32_t>(i);
  return best;
}

int32_t drawToken(std::span<const float> logits, Rng &rng) {
  const float top = maxFinite(logits);
  if (!std::isfinite(top))
    return -1;
  double sum = 0;
  for (float l : logits)
    if (std::isfinite(l))
      sum += std::exp(static_cast<double>(l) - top);
  const double target = rng.uniform() * sum;
  double cumulative = 0;
  int32_t last = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i]))
      continue;
    last = static_cast<int32_t>(i);
    cumulative += std::exp(static_cast<double>(logits[i]) - top);
    if (cumulative > target)
      return last;
  }
  return last; // rounding left target at the very end
}

TokenLogprobs collectLogprobs(std::span<const float> logprobs, int32_t sampledId, int32_t topN) {
  TokenLogprobs out;
  out.sampled = {sampledId, inVocab(sampledId, logprobs.size()) ? logprobs[sampledId] : kMasked};
  const size_t n = std::min<size_t>(std::max(topN, 0), logprobs.size());
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logprobs[a] != logprobs[b] ? logprobs[a] > logprobs[b] : a < b;
  });
  for (size_t i = 0; i < n; ++i)
    out.top.push_back({ids[i], logprobs[ids[i]]});
  return out;
}

void applyAllowedMask(std::span<float> logits, std::span<const uint8_t> allowed) {
  if (allowed.empty())
    return;
  for (size_t i = 0; i < logits.size(); ++i)
    if (i >= allowed.size() || allowed[i] == 0)
      logits[i] = kMasked;
}

Status noTokenLeftError(size_t candidates) {
  return internalError("sampling: no finite logit left among " + std::to_string(candidates) +
                       " (all NaN, -inf or masked)");
}

Result<SampledToken> sampleToken(std::span<const float> logits, const SamplingParams &params,
                                 const SamplingHistory &history, Rng &rng) {
  std::vector<float> x(logits.begin(), logits.end());
  for (float &l : x)
    if (std::isnan(l))
      l = kMasked;
  suppressTokens(x, history.suppressedIds);
  applyAllowedMask(x, history.allowedMask);
  applyPenalties(x, history.promptIds, history.outputIds, params);
  const bool greedy = params.temperature < kGreedyTemperature;
  if (!greedy)
    applyTemperature(x, params.temperature);
  std::vector<float> logprobs;
  if (params.logprobs)
    logprobs = logSoftmax(x);
  int32_t token = -1;
  if (greedy) {
    token = argmaxToken(x);
  } else {
    applyMinP(x, params.minP);
    applyTopK(x, params.topK);
    applyTopP(x, params.topP);
    token = drawToken(x, rng);
  }
  if (token < 0)
    return noTokenLeftError(x.size());
  SampledToken result{token, std::nullopt};
  if (params.logprobs)
    result.logprobs = collectLogprobs(logprobs, token, *params.logprobs);
  return result;
}

} // namespace kiln::rt
