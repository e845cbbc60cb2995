// Mixture-of-experts MLP (kernels.h moeExperts): route each row, then run every expert once over
// the rows routed to it (gathered, in row order) through `linear` and SiLU * up, and add each
// expert's weighted output into its rows in increasing expert index, as transformers' Mixtral /
// Qwen3-MoE experts loop does. A row's routing and sums depend only on that row, and `linear`'s
// per-row results do not depend on the rows gathered with it, so batching changes nothing.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

struct Route {
  int32_t expert;
  float weight;
};

// softmax in fp32 (max-subtracted, as torch), the top k by probability (ties: the lower index,
// torch.topk's order on CPU), renormalized by their sum in that order.
void routeRow(const float *logits, int32_t experts, int32_t k, bool renormalize, Route *out) {
  float maxLogit = logits[0];
  for (int32_t e = 1; e < experts; ++e)
    maxLogit = std::max(maxLogit, logits[e]);
  std::vector<float> p(static_cast<size_t>(experts));
  float sum = 0.0f;
  for (int32_t e = 0; e < experts; ++e)
    sum += (p[e] = std::exp(logits[e] - maxLogit));
  for (float &v : p)
    v /= sum;
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int32_t e = 0; e < experts; ++e)
    order[e] = e;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float total = 0.0f;
  for (int32_t i = 0; i < k; ++i)
    total += p[order[i]];
  for (int32_t i = 0; i < k; ++i)
    out[i] = {order[i], renormalize ? p[order[i]] / total : p[order[i]]};
}

size_t alignedTo64(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

// One expert's packed matrices: gate_up's and down's strides.
struct PackedStrides {
  size_t gateUp, down;
};
PackedStrides packedStrides(WeightType type, int32_t hidden, int32_t intermediate) {
  return {alignedTo64(linearPackedWeightBytes(type, 2 * intermediate, hidden)),
          alignedTo64(linearPackedWeightBytes(type, hidden, intermediate))};
}

// v rounded to `type` and back (what storing it in a `type` buffer does).
void roundTo(ElemType type, float *v, int64_t n, std::vector<uint16_t> &scratch) {
  if (type == ElemType::kF32)
    return;
  scratch.resize(static_cast<size_t>(n));
  storeRun(v, n, scratch.data(), type, 0);
  loadRun(scratch.data(), type, 0, n, v);
}

} // namespace

size_t moePackedWeightBytes(WeightType type, int32_t experts, int32_t hidden,
                            int32_t intermediate) {
  const PackedStrides s = packedStrides(type, hidden, intermediate);
  return (s.gateUp == 0 || s.down == 0) ? 0 : size_t(experts) * (s.gateUp + s.down);
}

void packMoeWeights(const void *gateUp, const void *down, WeightType type, int32_t experts,
                    int32_t hidden, int32_t intermediate, void *packed) {
  const PackedStrides s = packedStrides(type, hidden, intermediate);
  const size_t wBytes = type == WeightType::kF32 ? 4 : 2;
  auto *out = static_cast<uint8_t *>(packed);
  for (int32_t e = 0; e < experts; ++e) {
    packLinearWeights(static_cast<const uint8_t *>(gateUp) +
                          size_t(e) * 2 * intermediate * hidden * wBytes,
                      type, 2 * intermediate, hidden, out + size_t(e) * s.gateUp);
    packLinearWeights(
        static_cast<const uint8_t *>(down) + size_t(e) * hidden * intermediate * wBytes, type,
        hidden, intermediate, out + size_t(experts) * s.gateUp + size_t(e) * s.down);
  }
}

void moeExperts(const MoeExpertsArgs &args) {
  const int32_t rows = args.rows, H = args.hidden, I = args.intermediate, K = args.topK;
  if (rows <= 0)
    return;
  std::vector<float> logits(static_cast<size_t>(args.numExperts));
  std::vector<Route> routes(static_cast<size_t>(rows) * K);
  for (int32_t r = 0; r < rows; ++r) {
    loadRun(args.routerLogits, args.type, int64_t(r) * args.numExperts, args.numExperts,
            logits.data());
    routeRow(logits.data(), args.numExperts, K, args.renormalize, &routes[size_t(r) * K]);
  }
  std::vector<float> y(static_cast<size_t>(rows) * H, 0.0f);
  std::vector<float> x, gateUp, act, expertOut;
  std::vector<int32_t> members;
  std::vector<float> weights;
  std::vector<uint16_t> halves;
  const size_t wBytes = args.weightType == WeightType::kF32 ? 4 : 2;
  const PackedStrides strides = packedStrides(args.weightType, H, I);
  const auto *packed = static_cast<const uint8_t *>(args.packed);
  for (int32_t e = 0; e < args.numExperts; ++e) {
    members.clear();
    weights.clear();
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t i = 0; i < K; ++i)
        if (routes[size_t(r) * K + i].expert == e) {
          members.push_back(r);
          weights.push_back(routes[size_t(r) * K + i].weight);
        }
    const auto n = static_cast<int32_t>(members.size());
    if (n == 0)
      continue;
    x.resize(size_t(n) * H);
    for (int32_t m = 0; m < n; ++m)
      loadRun(args.x, args.type, int64_t(members[m]) * H, H, x.data() + size_t(m) * H);
    gateUp.resize(size_t(n) * 2 * I);
    const auto *gateUpW =
        static_cast<const uint8_t *>(args.gateUp) + size_t(e) * 2 * I * H * wBytes;
    linear({x.data(), gateUpW, args.weightType, nullptr, gateUp.data(), n, H, 2 * I, ElemType::kF32,
            ElemType::kF32, packed ? packed + size_t(e) * strides.gateUp : nullptr});
    roundTo(args.type, gateUp.data(), int64_t(n) * 2 * I, halves);
    act.resize(size_t(n) * I);
    siluMul({gateUp.data(), act.data(), n, I});
    roundTo(args.type, act.data(), int64_t(n) * I, halves);
    expertOut.resize(size_t(n) * H);
    const auto *downW = static_cast<const uint8_t *>(args.down) + size_t(e) * H * I * wBytes;
    linear({act.data(), downW, args.weightType, nullptr, expertOut.data(), n, I, H, ElemType::kF32,
            ElemType::kF32,
            packed ? packed + size_t(args.numExperts) * strides.gateUp + size_t(e) * strides.down
                   : nullptr});
    roundTo(args.type, expertOut.data(), int64_t(n) * H, halves);
    for (int32_t m = 0; m < n; ++m) {
      float *row = y.data() + size_t(members[m]) * H;
      const float *o = expertOut.data() + size_t(m) * H;
      for (int32_t h = 0; h < H; ++h)
        row[h] += weights[m] * o[h];
    }
  }
  storeRun(y.data(), int64_t(rows) * H, args.out, args.type, 0);
}

} // namespace kiln::kernels::cpu
