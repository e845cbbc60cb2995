// MoeExperts (plan.fbs): a mixture-of-experts MLP, one CTA per row (decode-sized steps; the
// grouped GEMMs of kernels/cuda/moe_grouped.cuh run the others). The CTA routes its row
// (softmax of the router logits in fp32, the top TOPK with ties to the lower index, renormalized
// when asked), then for each chosen expert in increasing index computes [gate | up] (only that
// expert's weights are read), silu(gate) * up and the down projection, adding p * output. What
// kernels/cpu/moe.cc rounds to T (the expert's products, as separate Linear / SiluMul ops would),
// this rounds too; the sums run in another order, so results agree within fp32 rounding.
//
// Grid rule: grid.x = rows, block = THREADS, static shared memory: the row, the activations and
// the accumulators in fp32 (HIDDEN + INTER + HIDDEN floats).
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// One row's routing, by one thread: softmax of its router logits in fp32, the TOPK largest
// (ties: the lower index), stored in increasing expert index with their probabilities,
// renormalized to sum 1 when asked (kernels/cpu/moe.cc routeRow).
template <typename T, int EXPERTS, int TOPK>
__device__ __forceinline__ void moeRouteRow(const T *logits, int renormalize, int *expert,
                                            float *weight) {
  float p[EXPERTS];
  float maxLogit = toFloat<T>(logits[0]);
  for (int e = 1; e < EXPERTS; ++e)
    maxLogit = fmaxf(maxLogit, toFloat<T>(logits[e]));
  float sum = 0.0f;
  for (int e = 0; e < EXPERTS; ++e)
    sum += (p[e] = expf(toFloat<T>(logits[e]) - maxLogit));
  for (int e = 0; e < EXPERTS; ++e)
    p[e] /= sum;
  bool taken[EXPERTS] = {};
  float total = 0.0f;
  for (int k = 0; k < TOPK; ++k) { // the largest left; ties: the lower index
    int best = -1;
    for (int e = 0; e < EXPERTS; ++e)
      if (!taken[e] && (best < 0 || p[e] > p[best]))
        best = e;
    taken[best] = true;
    total += p[best];
  }
  int k = 0;
  for (int e = 0; e < EXPERTS; ++e)
    if (taken[e]) {
      expert[k] = e;
      weight[k++] = renormalize ? p[e] / total : p[e];
    }
}

template <typename T, typename W, int HIDDEN, int INTER, int EXPERTS, int TOPK, int THREADS>
struct MoeExpertsRow {
  struct Shared {
    float x[HIDDEN];
    float act[INTER];
    float acc[HIDDEN];
    int expert[TOPK];
    float weight[TOPK];
  };

  static __device__ __forceinline__ float rounded(float v) { return toFloat<T>(fromFloat<T>(v)); }

  static __device__ __forceinline__ float dot(const W *w, const float *v, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i)
      s += toFloat<W>(w[i]) * v[i];
    return s;
  }

  static __device__ __forceinline__ void run(const MoeExpertsParams &p) {
    __shared__ Shared sh;
    const int row = blockIdx.x;
    if (row >= p.rows)
      return;
    const T *x = static_cast<const T *>(p.x) + static_cast<int64_t>(row) * HIDDEN;
    for (int h = threadIdx.x; h < HIDDEN; h += THREADS) {
      sh.x[h] = toFloat<T>(x[h]);
      sh.acc[h] = 0.0f;
    }
    if (threadIdx.x == 0)
      moeRouteRow<T, EXPERTS, TOPK>(static_cast<const T *>(p.routerLogits) +
                                        static_cast<int64_t>(row) * EXPERTS,
                                    p.renormalize, sh.expert, sh.weight);
    __syncthreads();
    const W *gateUp = static_cast<const W *>(p.gateUp);
    const W *down = static_cast<const W *>(p.down);
    for (int k = 0; k < TOPK; ++k) {
      const int64_t e = sh.expert[k];
      for (int i = threadIdx.x; i < INTER; i += THREADS) {
        const float g = rounded(dot(gateUp + (e * 2 * INTER + i) * HIDDEN, sh.x, HIDDEN));
        const float u = rounded(dot(gateUp + (e * 2 * INTER + INTER + i) * HIDDEN, sh.x, HIDDEN));
        sh.act[i] = rounded(g / (1.0f + expf(-g)) * u);
      }
      __syncthreads();
      for (int h = threadIdx.x; h < HIDDEN; h += THREADS)
        sh.acc[h] += sh.weight[k] * rounded(dot(down + (e * HIDDEN + h) * INTER, sh.act, INTER));
      __syncthreads();
    }
    T *out = static_cast<T *>(p.out) + static_cast<int64_t>(row) * HIDDEN;
    for (int h = threadIdx.x; h < HIDDEN; h += THREADS)
      out[h] = fromFloat<T>(sh.acc[h]);
  }
};

} // namespace kiln::kernels::cuda
