// GEMV: a Linear of at most kGemvMaxRows rows (decode steps) as one pass over W (plan.fbs Linear:
// y = x W^T (+ b), fp32 accumulation, bias added in fp32, y rounded once). At these row counts the
// op only has to read W once, so the kernel is written for bandwidth: every warp streams whole W
// rows in 16-byte vectors (lanes side by side over `in`, coalesced), kGemvLoadsPerLane of them in
// flight per lane before any is used, x read through the read-only path (it is small and shared
// by every warp), fp32 accumulators per (output, row) reduced across the warp at the end.
//
// Grid rule (params.h): grid.x = ceil(out / gemvOutputsPerCta(outsPerWarp)), block =
// kGemvThreads; warp w of CTA b computes outputs [(b * warps + w) * outsPerWarp, ... +
// outsPerWarp). Warps past `out` read row 0 (in bounds) and store nothing.
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

// One vector of a W row as loaded: its raw elements, converted to fp32 only when used, so all of a
// lane's loads are issued before the first multiply waits on any of them.
template <typename T, int N> struct GemvRaw { alignas(16) T v[N]; };
template <typename T, int N> __device__ __forceinline__ GemvRaw<T, N> gemvLoadRaw(const T *src) {
  GemvRaw<T, N> raw;
  if constexpr (N * sizeof(T) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < static_cast<int>(N * sizeof(T) / 16); ++i)
      reinterpret_cast<uint4 *>(raw.v)[i] = __ldg(reinterpret_cast<const uint4 *>(src) + i);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      raw.v[i] = src[i];
  }
  return raw;
}

// The lane's next UNROLL vectors of each of its OUTS W rows, from vector s0 on (stride 32).
template <typename T, int VEC, int STEPS, int UNROLL, int OUTS>
__device__ __forceinline__ void gemvLoadBatch(const T *const (&wRow)[OUTS], int s0,
                                              GemvRaw<T, VEC> (&raw)[UNROLL][OUTS]) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
#pragma unroll
    for (int o = 0; o < OUTS; ++o)
      if (s0 + 32 * u < STEPS)
        raw[u][o] = gemvLoadRaw<T, VEC>(wRow[o] + (s0 + 32 * u) * VEC);
}

// ROWS rows and OUTS W rows per warp at compile time: accumulators and x loads for exactly the
// step's rows, so the batch-1 case carries no registers or predicates for the other seven.
template <typename T, int IN, typename Y, int ROWS, int OUTS>
__device__ __forceinline__ void gemvRows(const GemvParams &p) {
  constexpr int kVec = gemvVectorWidth<T, IN>();
  constexpr int kSteps = IN / kVec; // vectors per W row
  constexpr int kUnroll = kGemvLoadsPerLane / OUTS;
  static_assert(kGemvThreads % 32 == 0 && kGemvLoadsPerLane % OUTS == 0, "whole warps and loads");
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int first = (blockIdx.x * (kGemvThreads / 32) + warp) * OUTS;
  const T *__restrict__ x = static_cast<const T *>(p.x);
  const T *__restrict__ w = static_cast<const T *>(p.w);
  bool valid[OUTS];
  const T *wRow[OUTS];
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    valid[o] = first + o < p.out;
    wRow[o] = w + static_cast<int64_t>(valid[o] ? first + o : 0) * IN;
  }
  float acc[OUTS][ROWS];
#pragma unroll
  for (int o = 0; o < OUTS; ++o)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      acc[o][r] = 0.0f;

      // Before waiting for the kernel that writes x (common.cuh waitForPriorGrids), the lane's
      // first W vectors are prefetched into L2: W is a weight, so under programmatic dependent
      // launch the weight stream starts while that kernel finishes. Prefetches hold no registers;
      // loading them into registers before the loop doubled the kernel's registers (and cut its
      // occupancy).
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int o = 0; o < OUTS; ++o)
      if (lane + 32 * u < kSteps)
        prefetchToL2(wRow[o] + (lane + 32 * u) * kVec);
  waitForPriorGrids();
  for (int s0 = lane; s0 < kSteps; s0 += 32 * kUnroll) {
    GemvRaw<T, kVec> raw[kUnroll][OUTS];
    gemvLoadBatch<T, kVec, kSteps, kUnroll, OUTS>(wRow, s0, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = s0 + 32 * u;
      if (s >= kSteps)
        break;
      float wv[OUTS][kVec];
#pragma unroll
      for (int o = 0; o < OUTS; ++o)
        loadFloats<T, kVec>(raw[u][o].v, wv[o]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float xv[kVec];
        gemvLoad<T, kVec>(x + static_cast<int64_t>(r) * IN + s * kVec, xv);
#pragma unroll
        for (int o = 0; o < OUTS; ++o)
#pragma unroll
          for (int i = 0; i < kVec; ++i)
            acc[o][r] += wv[o][i] * xv[i];
      }
    }
  }

  Y *y = static_cast<Y *>(p.y);
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
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

template <typename T, int IN, typename Y, int OUTS>
__device__ __forceinline__ void gemvOuts(const GemvParams &p) {
  static_assert(kGemvMaxRows == 8, "one case per row count");
  switch (p.rows) {
  case 1:
    return gemvRows<T, IN, Y, 1, OUTS>(p);
  case 2:
    return gemvRows<T, IN, Y, 2, OUTS>(p);
  case 3:
    return gemvRows<T, IN, Y, 3, OUTS>(p);
  case 4:
    return gemvRows<T, IN, Y, 4, OUTS>(p);
  case 5:
    return gemvRows<T, IN, Y, 5, OUTS>(p);
  case 6:
    return gemvRows<T, IN, Y, 6, OUTS>(p);
  case 7:
    return gemvRows<T, IN, Y, 7, OUTS>(p);
  case 8:
    return gemvRows<T, IN, Y, 8, OUTS>(p);
  default:
    return; // the host never launches other row counts (cuda_gemv.h gemvRuns)
  }
}

template <typename T, int IN, typename Y>
__device__ __forceinline__ void gemv(const GemvParams &p) {
  static_assert(kGemvMaxOutputsPerWarp == 2, "one case per W rows per warp");
  if (p.outsPerWarp == 2)
    return gemvOuts<T, IN, Y, 2>(p);
  return gemvOuts<T, IN, Y, 1>(p);
}

} // namespace kiln::kernels::cuda
