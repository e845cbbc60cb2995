// Logits post-processing for sampling on the device: greedy sampling needs only each row's
// argmax, so a decode step copies one id per sequence to the host instead of its vocab-wide row
// (128,256 floats for Llama 3: 131 MB per step at batch 256).
//
// Grid rule: grid.x = rows (one CTA per logits row), block = THREADS. Result per row: the lowest
// id among the largest finite values, -1 when no value is finite (NaN and +-inf never win),
// which is runtime/sampling/sampler.cc argmaxToken after sampleToken's NaN -> -inf.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

struct ArgmaxCandidate {
  float value;
  int id; // kNoId: none seen
};

constexpr int kNoId = 0x7fffffff;

__device__ __forceinline__ ArgmaxCandidate betterOf(ArgmaxCandidate a, ArgmaxCandidate b) {
  return (b.value > a.value || (b.value == a.value && b.id < a.id)) ? b : a;
}

__device__ __forceinline__ ArgmaxCandidate warpBest(ArgmaxCandidate c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const ArgmaxCandidate other{__shfl_xor_sync(0xffffffffu, c.value, offset),
                                __shfl_xor_sync(0xffffffffu, c.id, offset)};
    c = betterOf(c, other);
  }
  return c;
}

template <int THREADS> __device__ __forceinline__ void argmaxRows(const ArgmaxRowsParams &p) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: a multiple of 32, at most 1024");
  __shared__ float values[THREADS / 32];
  __shared__ int ids[THREADS / 32];
  const int row = blockIdx.x;
  if (row >= p.rows)
    return;
  const float *x = p.logits + static_cast<int64_t>(row) * p.vocab;
  constexpr float kFloatMax = 3.402823466e+38f;
  ArgmaxCandidate best{negativeInfinity(), kNoId};
  // Each thread's ids rise (16-byte chunks, then the tail): '>' keeps its lowest. Rows start
  // 16-byte aligned when vocab % 4 == 0 (Llama 3's 128256); otherwise every load is scalar.
  const int vectors = (reinterpret_cast<unsigned long long>(x) % 16 == 0) ? p.vocab / 4 : 0;
  const float4 *x4 = reinterpret_cast<const float4 *>(x);
  for (int c = threadIdx.x; c < vectors; c += THREADS) {
    const float4 v = x4[c];
    const float lanes[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (fabsf(lanes[k]) <= kFloatMax && (best.id == kNoId || lanes[k] > best.value))
        best = {lanes[k], 4 * c + k};
  }
  for (int i = 4 * vectors + threadIdx.x; i < p.vocab; i += THREADS) {
    const float v = x[i];
    if (fabsf(v) <= kFloatMax && (best.id == kNoId || v > best.value))
      best = {v, i};
  }
  best = warpBest(best);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    values[warp] = best.value;
    ids[warp] = best.id;
  }
  __syncthreads();
  if (warp != 0)
    return;
  best = lane < THREADS / 32 ? ArgmaxCandidate{values[lane], ids[lane]}
                             : ArgmaxCandidate{negativeInfinity(), kNoId};
  best = warpBest(best);
  if (lane == 0)
    p.ids[row] = best.id == kNoId ? -1 : best.id;
}

} // namespace kiln::kernels::cuda
