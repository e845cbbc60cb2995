// RmsNorm, fused residual-add + RmsNorm, LayerNorm and SigmoidGatedAdd: the one-CTA-per-row
// reductions (plan.fbs RmsNorm / AddRmsNorm / LayerNorm / SigmoidGatedAdd).
//
// Grid rule: grid.x = rows (x_rows = Tokens or Logits, x_per_block 1), block = THREADS, no dynamic
// shared memory. One CTA per row: the row (HIDDEN elements) stays in registers between the sum of
// squares and the scaling, so x is read once and y written once.
//
// Numerics (plan.fbs, the CPU reference's operation order): fp32 variance = mean(x^2), then
// weight * (x * (1 / sqrt(var + eps))) in fp32, rounded once to the activation type T when stored.
// AddRmsNorm stores residual + x rounded to T and normalizes the residual as stored.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// VEC elements per access: 16 bytes when a row is a whole number of 16-byte vectors.
template <typename T, int HIDDEN> constexpr int normVectorWidth() {
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  return HIDDEN % kWide == 0 ? kWide : 1;
}

template <typename T, typename W, int HIDDEN, int THREADS> struct RmsNormRow {
  static constexpr int kVec = normVectorWidth<T, HIDDEN>();
  static constexpr int kVectors = HIDDEN / kVec;
  static constexpr int kIters = ceilDiv(kVectors, THREADS);
  static_assert(HIDDEN > 0 && THREADS >= 32 && THREADS <= 1024, "hidden/threads out of range");

  template <int N> static __device__ __forceinline__ void load(const T *src, float *dst) {
    if constexpr (N * sizeof(T) % 16 == 0)
      loadFloatsAligned<T, N>(src, dst);
    else
      loadFloats<T, N>(src, dst);
  }
  template <int N> static __device__ __forceinline__ void store(const float *src, T *dst) {
    if constexpr (N * sizeof(T) % 16 == 0)
      storeFloatsAligned<T, N>(src, dst);
    else
      storeFloats<T, N>(src, dst);
  }

  // Scales the row held in `v` (kIters x kVec floats, vector index tid + k * THREADS) into out.
  static __device__ __forceinline__ void normalize(float (&v)[kIters][kVec], const W *weight,
                                                   T *out, float eps) {
    __shared__ float scratch[THREADS / 32];
    float sumSquares = 0.0f;
#pragma unroll
    for (int k = 0; k < kIters; ++k)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        sumSquares += v[k][e] * v[k][e];
    sumSquares = blockSum<THREADS>(sumSquares, scratch);
    const float inverse = 1.0f / sqrtf(sumSquares / static_cast<float>(HIDDEN) + eps);
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int index = threadIdx.x + k * THREADS;
      if (index >= kVectors)
        break;
      float y[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        y[e] = toFloat<W>(weight[index * kVec + e]) * (v[k][e] * inverse);
      store<kVec>(y, out + index * kVec);
    }
  }
};

template <typename T, typename W, int HIDDEN, int THREADS>
__device__ __forceinline__ void rmsNorm(const RmsNormParams &p) {
  using Row = RmsNormRow<T, W, HIDDEN, THREADS>;
  const int row = blockIdx.x;
  if (row >= p.rows)
    return;
  const T *x = static_cast<const T *>(p.x) + static_cast<int64_t>(row) * HIDDEN;
  float v[Row::kIters][Row::kVec];
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
    if (index < Row::kVectors)
      Row::template load<Row::kVec>(x + index * Row::kVec, v[k]);
    else
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e)
        v[k][e] = 0.0f;
  }
  Row::normalize(v, static_cast<const W *>(p.weight),
                 static_cast<T *>(p.out) + static_cast<int64_t>(row) * HIDDEN, p.eps);
}

template <typename T, typename W, int HIDDEN, int THREADS>
__device__ __forceinline__ void addRmsNorm(const AddRmsNormParams &p) {
  using Row = RmsNormRow<T, W, HIDDEN, THREADS>;
  const int row = blockIdx.x;
  if (row >= p.rows)
    return;
  const int64_t base = static_cast<int64_t>(row) * HIDDEN;
  const T *x = static_cast<const T *>(p.x) + base;
  T *residual = static_cast<T *>(p.residual) + base;
  float v[Row::kIters][Row::kVec];
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
    if (index < Row::kVectors) {
      float a[Row::kVec];
      Row::template load<Row::kVec>(x + index * Row::kVec, a);
      Row::template load<Row::kVec>(residual + index * Row::kVec, v[k]);
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e)
        v[k][e] = roundTo<T>(v[k][e] + a[e]);
      Row::template store<Row::kVec>(v[k], residual + index * Row::kVec);
    } else {
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e)
        v[k][e] = 0.0f;
    }
  }
  Row::normalize(v, static_cast<const W *>(p.weight), static_cast<T *>(p.out) + base, p.eps);
}

// LayerNorm (encoders), the CPU reference's order (kernels/cpu/norm.cc): mean, then the biased
// variance of x - mean, then (x - mean) * rstd * w + b in fp32, rounded once to T.
template <typename T, typename W, int HIDDEN, int THREADS>
__device__ __forceinline__ void layerNorm(const LayerNormParams &p) {
  using Row = RmsNormRow<T, W, HIDDEN, THREADS>;
  __shared__ float scratch[THREADS / 32];
  const int row = blockIdx.x;
  if (row >= p.rows)
    return;
  const int64_t base = static_cast<int64_t>(row) * HIDDEN;
  float v[Row::kIters][Row::kVec];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e)
      v[k][e] = 0.0f;
    if (index < Row::kVectors)
      Row::template load<Row::kVec>(static_cast<const T *>(p.x) + base + index * Row::kVec, v[k]);
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e)
      sum += v[k][e];
  }
  const float mean = blockSum<THREADS>(sum, scratch) / static_cast<float>(HIDDEN);
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k)
    if (threadIdx.x + k * THREADS < Row::kVectors)
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e)
        squares += (v[k][e] - mean) * (v[k][e] - mean);
  const float rstd =
      1.0f / sqrtf(blockSum<THREADS>(squares, scratch) / static_cast<float>(HIDDEN) + p.eps);
  const W *weight = static_cast<const W *>(p.weight);
  const W *bias = static_cast<const W *>(p.bias);
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
    if (index >= Row::kVectors)
      break;
    float y[Row::kVec];
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e) {
      const int i = index * Row::kVec + e;
      y[e] = (v[k][e] - mean) * rstd * toFloat<W>(weight[i]) + toFloat<W>(bias[i]);
    }
    Row::template store<Row::kVec>(y, static_cast<T *>(p.out) + base + index * Row::kVec);
  }
}

// SigmoidGatedAdd (Qwen2-MoE's shared expert): one CTA per row, the gate's dot product x . w
// summed in fp32 across the CTA (blockSum), then a + gate * b in fp32, rounded once to T.
template <typename T, typename W, int HIDDEN, int THREADS>
__device__ __forceinline__ void sigmoidGatedAdd(const SigmoidGatedAddParams &p) {
  using Row = RmsNormRow<T, W, HIDDEN, THREADS>;
  __shared__ float scratch[THREADS / 32];
  const int row = blockIdx.x;
  if (row >= p.rows)
    return;
  const int64_t base = static_cast<int64_t>(row) * HIDDEN;
  const W *weight = static_cast<const W *>(p.weight);
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
    if (index < Row::kVectors) {
      float x[Row::kVec];
      Row::template load<Row::kVec>(static_cast<const T *>(p.x) + base + index * Row::kVec, x);
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e)
        dot += x[e] * toFloat<W>(weight[index * Row::kVec + e]);
    }
  }
  const float gate = 1.0f / (1.0f + expf(-blockSum<THREADS>(dot, scratch)));
#pragma unroll
  for (int k = 0; k < Row::kIters; ++k) {
    const int index = threadIdx.x + k * THREADS;
    if (index >= Row::kVectors)
      break;
    float a[Row::kVec], b[Row::kVec];
    Row::template load<Row::kVec>(static_cast<const T *>(p.a) + base + index * Row::kVec, a);
    Row::template load<Row::kVec>(static_cast<const T *>(p.b) + base + index * Row::kVec, b);
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e)
      a[e] += gate * b[e];
    Row::template store<Row::kVec>(a, static_cast<T *>(p.out) + base + index * Row::kVec);
  }
}

} // namespace kiln::kernels::cuda
