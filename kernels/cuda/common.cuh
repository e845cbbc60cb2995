// Helpers shared by the kernel templates: element conversions for the three activation types
// (float, __half, __nv_bfloat16), rounding a stored value to the activation type, and
// warp/block reductions. NVRTC-only (-std=c++17), no framework headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kiln/params.h"

namespace kiln::kernels::cuda {

template <typename T> struct Elem;
template <> struct Elem<float> {
  static __device__ __forceinline__ float toFloat(float v) { return v; }
  static __device__ __forceinline__ float fromFloat(float v) { return v; }
};
template <> struct Elem<__half> {
  static __device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half fromFloat(float v) { return __float2half_rn(v); }
};
template <> struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 fromFloat(float v) {
    return __float2bfloat16_rn(v);
  }
};

template <typename T> __device__ __forceinline__ float toFloat(T v) {
  return Elem<T>::toFloat(v);
}
template <typename T> __device__ __forceinline__ T fromFloat(float v) {
  return Elem<T>::fromFloat(v);
}
// The value an element of type T holds once stored: identity for fp32, a rounding for fp16/bf16.
// plan.fbs: every op computes in fp32 and rounds each output element once, so this is for values
// an op reads back after storing them (AddRmsNorm normalizes the residual as stored), never for
// intermediates.
template <typename T> __device__ __forceinline__ float roundTo(float v) {
  return toFloat<T>(fromFloat<T>(v));
}

// Loads/stores N consecutive elements as fp32, one element at a time (any alignment).
template <typename T, int N> __device__ __forceinline__ void loadFloats(const T *src, float *dst) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    dst[i] = toFloat<T>(src[i]);
}
template <typename T, int N> __device__ __forceinline__ void storeFloats(const float *src, T *dst) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    dst[i] = fromFloat<T>(src[i]);
}

// The same with 16-byte accesses: the caller guarantees `src`/`dst` are 16-byte aligned, which
// holds for row starts of buffers (device allocations are 256-byte aligned) when rows and
// offsets are multiples of 16 bytes.
template <typename T, int N>
__device__ __forceinline__ void loadFloatsAligned(const T *src, float *dst) {
  static_assert((N * sizeof(T)) % 16 == 0, "aligned loads move whole 16-byte vectors");
  constexpr int kVectors = static_cast<int>(N * sizeof(T) / 16);
  alignas(16) T staged[N];
#pragma unroll
  for (int i = 0; i < kVectors; ++i)
    reinterpret_cast<uint4 *>(staged)[i] = reinterpret_cast<const uint4 *>(src)[i];
  loadFloats<T, N>(staged, dst);
}
template <typename T, int N>
__device__ __forceinline__ void storeFloatsAligned(const float *src, T *dst) {
  static_assert((N * sizeof(T)) % 16 == 0, "aligned stores move whole 16-byte vectors");
  constexpr int kVectors = static_cast<int>(N * sizeof(T) / 16);
  alignas(16) T staged[N];
  storeFloats<T, N>(src, staged);
#pragma unroll
  for (int i = 0; i < kVectors; ++i)
    reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(staged)[i];
}

// -inf without <cmath> (NVRTC has no INFINITY): the initial running max of a softmax.
__device__ __forceinline__ float negativeInfinity() {
  return __int_as_float(0xff800000);
}

// Programmatic dependent launch (sm_90 and later; runtime/hal/cuda/cuda_device.cc launches the GEMV
// this way): a kernel so launched may start while the kernel before it on the stream still runs,
// and must wait here before it reads or writes any buffer that kernel or an earlier one touches.
// Elsewhere (older targets, cudasim) launches are serialized and this is a no-op.
__device__ __forceinline__ void waitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets a dependent kernel launched as above start now; it still waits (waitForPriorGrids) for this
// one to finish. Every generated entry point calls it first (compiler/codegen/kernel_catalog.cc).
__device__ __forceinline__ void allowDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Asks for the 128-byte line holding `address` to be brought into L2; no register waits on it.
__device__ __forceinline__ void prefetchToL2(const void *address) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
#else
  (void)address;
#endif
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the CTA; every thread gets the result. `scratch` holds THREADS / 32 floats.
template <int THREADS> __device__ __forceinline__ float blockSum(float v, float *scratch) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: a multiple of 32, at most 1024");
  constexpr int kWarps = THREADS / 32;
  v = warpSum(v);
  if (kWarps == 1)
    return v;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : 0.0f;
  v = warpSum(v);
  __syncthreads(); // scratch may be reused right after
  return v;
}

KILN_HOST_DEVICE constexpr int ceilDiv(int a, int b) {
  return (a + b - 1) / b;
}

// Prefill attention's CTAs: blockIdx.x numbers the row tiles of ROWS query tokens sequence by
// sequence (ceil(tokens_s / ROWS) each); CTAs past the last tile get seq -1.
struct PrefillTile {
  int seq = -1;
  int firstToken = 0; // first token of the tile
  int rows = 0;       // valid rows
};
template <int ROWS>
__device__ __forceinline__ PrefillTile findPrefillTile(const AttentionParams &p) {
  PrefillTile tile;
  int remaining = blockIdx.x;
  for (int s = 0; s < p.numSeqs; ++s) {
    const int begin = p.queryStartLoc[s];
    const int tokens = p.queryStartLoc[s + 1] - begin;
    const int tiles = ceilDiv(tokens, ROWS);
    if (remaining < tiles) {
      tile.seq = s;
      tile.firstToken = begin + remaining * ROWS;
      tile.rows = min(ROWS, tokens - remaining * ROWS);
      return tile;
    }
    remaining -= tiles;
  }
  return tile;
}

} // namespace kiln::kernels::cuda
