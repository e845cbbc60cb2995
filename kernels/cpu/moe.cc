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
// `p` and `order` are the caller's scratch, `experts` long.
void routeRow(const float *logits, int32_t experts, int32_t k, bool renormalize, float *p,
              int32_t *order, Route *out) {
  float maxLogit = logits[0];
  for (int32_t e = 1; e < experts; ++e)
    maxLogit = std::max(maxLogit, logits[e]);
  float sum = 0.0f;
  for (int32_t e = 0; e < experts; ++e)
    sum += (p[e] = std::exp(logits[e] - maxLogit));
  for (int32_t e = 0; e < experts; ++e)
    p[e] /= sum;
  for (int32_t e = 0; e < experts; ++e)
    order[e] = e;
  std::partial_sort(order, order + k, order + experts,
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
PackedStrides packedStrides(WeightType type, int32_t hidden, int32_t intermediate,
                            QuantWeight gateUpQuant, QuantWeight downQuant) {
  return {alignedTo64(linearPackedWeightBytes(type, 2 * intermediate, hidden, gateUpQuant)),
          alignedTo64(linearPackedWeightBytes(type, hidden, intermediate, downQuant))};
}

// Expert e's rows [e * rows, (e + 1) * rows) of a stacked matrix: where its Linear reads them and
// how. A float matrix: the rows' own first byte; a quantized one: the matrix's, with the slice.
struct ExpertMatrix {
  const void *weight;
  QuantWeight quant;
};
ExpertMatrix expertMatrix(const void *stacked, WeightType type, QuantWeight quant, int32_t experts,
                          int32_t e, int32_t rows, int32_t cols) {
  if (quant.groupSize > 0) {
    quant.matrixRows = int64_t(experts) * rows;
    quant.firstRow = int64_t(e) * rows;
    return {stacked, quant};
  }
  return {static_cast<const uint8_t *>(stacked) + size_t(e) * rows * cols * elemBytes(type), quant};
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

size_t moePackedWeightBytes(WeightType type, int32_t experts, int32_t hidden, int32_t intermediate,
                            QuantWeight gateUpQuant, QuantWeight downQuant) {
  const PackedStrides s = packedStrides(type, hidden, intermediate, gateUpQuant, downQuant);
  return (s.gateUp == 0 || s.down == 0) ? 0 : size_t(experts) * (s.gateUp + s.down);
}

void packMoeWeights(const void *gateUp, const void *down, WeightType type, int32_t experts,
                    int32_t hidden, int32_t intermediate, void *packed, QuantWeight gateUpQuant,
                    QuantWeight downQuant) {
  const PackedStrides s = packedStrides(type, hidden, intermediate, gateUpQuant, downQuant);
  auto *out = static_cast<uint8_t *>(packed);
  for (int32_t e = 0; e < experts; ++e) {
    const ExpertMatrix g =
        expertMatrix(gateUp, type, gateUpQuant, experts, e, 2 * intermediate, hidden);
    packLinearWeights(g.weight, type, 2 * intermediate, hidden, out + size_t(e) * s.gateUp,
                      g.quant);
    const ExpertMatrix d = expertMatrix(down, type, downQuant, experts, e, hidden, intermediate);
    packLinearWeights(d.weight, type, hidden, intermediate,
                      out + size_t(experts) * s.gateUp + size_t(e) * s.down, d.quant);
  }
}

// The engine thread calls this once per MoE layer and step: its buffers are kept.
struct MoeScratch {
  std::vector<float> logits, p, y, x, gateUp, act, expertOut, weights;
  std::vector<int32_t> order, starts, members;
  std::vector<Route> routes;
  std::vector<uint16_t> halves;
};

void moeExperts(const MoeExpertsArgs &args) {
  const int32_t rows = args.rows, H = args.hidden, I = args.intermediate, K = args.topK;
  const int32_t E = args.numExperts;
  if (rows <= 0)
    return;
  thread_local MoeScratch callerScratch;
  MoeScratch &s = callerScratch;
  s.logits.resize(size_t(E));
  s.p.resize(size_t(E));
  s.order.resize(size_t(E));
  s.routes.resize(size_t(rows) * K);
  for (int32_t r = 0; r < rows; ++r) {
    loadRun(args.routerLogits, args.type, int64_t(r) * E, E, s.logits.data());
    routeRow(s.logits.data(), E, K, args.renormalize, s.p.data(), s.order.data(),
             &s.routes[size_t(r) * K]);
  }
  // Each expert's rows (ascending) and weights, expert by expert: a counting sort of the routes.
  s.starts.assign(size_t(E) + 1, 0);
  for (const Route &route : s.routes)
    ++s.starts[route.expert + 1];
  for (int32_t e = 0; e < E; ++e)
    s.starts[e + 1] += s.starts[e];
  s.members.resize(s.routes.size());
  s.weights.resize(s.routes.size());
  s.order.assign(s.starts.begin(), s.starts.end() - 1); // each expert's next free slot
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t i = 0; i < K; ++i) {
      const Route &route = s.routes[size_t(r) * K + i];
      const int32_t slot = s.order[route.expert]++;
      s.members[slot] = r;
      s.weights[slot] = route.weight;
    }
  s.y.assign(size_t(rows) * H, 0.0f);
  const PackedStrides strides =
      packedStrides(args.weightType, H, I, args.gateUpQuant, args.downQuant);
  const auto *packed = static_cast<const uint8_t *>(args.packed);
  for (int32_t e = 0; e < E; ++e) {
    const int32_t first = s.starts[e], n = s.starts[e + 1] - first;
    if (n == 0)
      continue;
    const int32_t *members = s.members.data() + first;
    s.x.resize(size_t(n) * H);
    for (int32_t m = 0; m < n; ++m)
      loadRun(args.x, args.type, int64_t(members[m]) * H, H, s.x.data() + size_t(m) * H);
    s.gateUp.resize(size_t(n) * 2 * I);
    const ExpertMatrix gateUpW =
        expertMatrix(args.gateUp, args.weightType, args.gateUpQuant, E, e, 2 * I, H);
    linear({s.x.data(), gateUpW.weight, args.weightType, nullptr, s.gateUp.data(), n, H, 2 * I,
            ElemType::kF32, ElemType::kF32, packed ? packed + size_t(e) * strides.gateUp : nullptr,
            gateUpW.quant});
    roundTo(args.type, s.gateUp.data(), int64_t(n) * 2 * I, s.halves);
    s.act.resize(size_t(n) * I);
    siluMul({s.gateUp.data(), s.act.data(), n, I});
    roundTo(args.type, s.act.data(), int64_t(n) * I, s.halves);
    s.expertOut.resize(size_t(n) * H);
    const ExpertMatrix downW = expertMatrix(args.down, args.weightType, args.downQuant, E, e, H, I);
    linear({s.act.data(), downW.weight, args.weightType, nullptr, s.expertOut.data(), n, I, H,
            ElemType::kF32, ElemType::kF32,
            packed ? packed + size_t(E) * strides.gateUp + size_t(e) * strides.down : nullptr,
            downW.quant});
    roundTo(args.type, s.expertOut.data(), int64_t(n) * H, s.halves);
    for (int32_t m = 0; m < n; ++m) {
      float *row = s.y.data() + size_t(members[m]) * H;
      const float *o = s.expertOut.data() + size_t(m) * H;
      const float w = s.weights[first + m];
      for (int32_t h = 0; h < H; ++h)
        row[h] += w * o[h];
    }
  }
  storeRun(s.y.data(), int64_t(rows) * H, args.out, args.type, 0);
}

} // namespace kiln::kernels::cpu
