// GEMV: a Linear of at most kGemvMaxRows rows (decode steps) as one pass over W (plan.fbs Linear:
// y = x W^T (+ b), fp32 accumulation, bias added in fp32, y rounded once). At these row counts the
// op only has to read W once, so the kernel is written for bandwidth: every warp streams whole W
// rows in 16-byte vectors (lanes side by side over `in`, coalesced), several vectors in flight
// per lane, x read through the read-only path (it is small and shared by every warp), fp32
// accumulators per (output, row) reduced across the warp at the end.
//
// Grid rule (params.h): grid.x = ceil(out / kGemvOutputsPerCta), block = kGemvThreads; warp w of
// CTA b computes outputs [(b * warps + w) * kGemvOutputsPerWarp, ... + kGemvOutputsPerWarp).
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// Elements per lane per step: one 16-byte vector when every W row (IN elements) is a whole
// number of them (row starts stay 16-byte aligned), else one element.
template <typename T, int IN> constexpr int gemvVectorWidth() {
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  return IN % kWide == 0 ? kWide : 1;
}

template <typename T, int N>
__device__ __forceinline__ void gemvLoad(const T *__restrict__ src, float *dst) {
  if constexpr (N * sizeof(T) % 16 == 0)
    loadFloatsAligned<T, N>(src, dst);
  else
    loadFloats<T, N>(src, dst);
}

// ROWS rows at compile time: accumulators and x loads for exactly the step's rows, so the batch-1
// case carries no registers or predicates for the other seven.
template <typename T, int IN, typename Y, int ROWS>
__device__ __forceinline__ void gemvRows(const GemvParams &p) {
  constexpr int kVec = gemvVectorWidth<T, IN>();
  constexpr int kSteps = IN / kVec; // vectors per W row
  constexpr int kOuts = kGemvOutputsPerWarp;
  static_assert(kGemvThreads % 32 == 0, "whole warps");
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int first = (blockIdx.x * (kGemvThreads / 32) + warp) * kOuts;
  const T *__restrict__ x = static_cast<const T *>(p.x);
  const T *__restrict__ w = static_cast<const T *>(p.w);
  bool valid[kOuts];
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
    valid[o] = first + o < p.out;
  float acc[kOuts][ROWS];
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      acc[o][r] = 0.0f;

#pragma unroll 2
  for (int s = lane; s < kSteps; s += 32) {
    float wv[kOuts][kVec];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) {
      if (valid[o]) {
        gemvLoad<T, kVec>(w + static_cast<int64_t>(first + o) * IN + s * kVec, wv[o]);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          wv[o][i] = 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float xv[kVec];
      gemvLoad<T, kVec>(x + static_cast<int64_t>(r) * IN + s * kVec, xv);
#pragma unroll
      for (int o = 0; o < kOuts; ++o)
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          acc[o][r] += wv[o][i] * xv[i];
    }
  }

  Y *y = static_cast<Y *>(p.y);
#pragma unroll
  for (int o = 0; o < kOuts; ++o) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float sum = warpSum(acc[o][r]); // every lane takes part: valid[o] is warp-uniform
      if (lane == 0 && valid[o]) {
        const int out = first + o;
        const float value = p.bias ? sum + p.bias[out] : sum;
        y[static_cast<int64_t>(r) * p.out + out] = fromFloat<Y>(value);
      }
    }
  }
}

template <typename T, int IN, typename Y>
__device__ __forceinline__ void gemv(const GemvParams &p) {
  static_assert(kGemvMaxRows == 8, "one case per row count");
  switch (p.rows) {
  case 1:
    return gemvRows<T, IN, Y, 1>(p);
  case 2:
    return gemvRows<T, IN, Y, 2>(p);
  case 3:
    return gemvRows<T, IN, Y, 3>(p);
  case 4:
    return gemvRows<T, IN, Y, 4>(p);
  case 5:
    return gemvRows<T, IN, Y, 5>(p);
  case 6:
    return gemvRows<T, IN, Y, 6>(p);
  case 7:
    return gemvRows<T, IN, Y, 7>(p);
  case 8:
    return gemvRows<T, IN, Y, 8>(p);
  default:
    return; // the host never launches other row counts (cuda_gemv.h gemvRuns)
  }
}

} // namespace kiln::kernels::cuda
