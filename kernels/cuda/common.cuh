// Helpers shared by the kernel templates: element conversions for the three activation types
// (float, __half, __nv_bfloat16) and the fp8 KV cache's (Fp8E4M3), rounding a stored value to the
// activation type, and warp/block reductions. NVRTC-only (-std=c++17), no framework headers.
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

// fp8 E4M3 ("E4M3FN": bias 7, no infinities, S.1111.111 the only NaN, largest finite 448), the
// KV cache's element with `--kv-dtype fp8`, and a Q8F weight's value. The conversions match
// runtime/base/fp8.h bit for bit: exact widening; rounding to nearest even, saturating at +-448.
struct Fp8E4M3 {
  unsigned char bits;
};
__device__ __forceinline__ float f8e4m3ToFloat(unsigned int b) {
  const int sign = static_cast<int>((b & 0x80u) << 24);
  const int exponent = static_cast<int>((b >> 3) & 0xFu);
  const int mantissa = static_cast<int>(b & 0x7u);
  if (exponent == 0xF && mantissa == 0x7)
    return __int_as_float(0x7FC00000);
  if (exponent == 0) { // subnormal: mantissa x 2^-9
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign ? -magnitude : magnitude;
  }
  return __int_as_float(sign | ((exponent + 120) << 23) | (mantissa << 20));
}
__device__ __forceinline__ unsigned char floatToF8e4m3(float f) {
  if (f != f)
    return 0x7F;
  const unsigned char sign = __float_as_int(f) < 0 ? 0x80 : 0x00;
  const float a = fabsf(f);
  if (a >= 448.0f)
    return sign | 0x7E;
  if (a < 0.015625f) // below 2^-6: steps of 2^-9 (8 steps reach the smallest normal)
    return sign | static_cast<unsigned char>(rintf(a * 512.0f));
  int exponent = 0;
  const float fraction = frexpf(a, &exponent); // a = fraction x 2^exponent, [0.5, 1)
  float m = rintf((2.0f * fraction - 1.0f) * 8.0f);
  int e = exponent - 1 + 7;
  if (m == 8.0f) {
    m = 0.0f;
    ++e;
  }
  if (e > 15 || (e == 15 && m == 7.0f))
    return sign | 0x7E;
  return sign | static_cast<unsigned char>(e << 3) | static_cast<unsigned char>(m);
}
template <> struct Elem<Fp8E4M3> {
  static __device__ __forceinline__ float toFloat(Fp8E4M3 v) { return f8e4m3ToFloat(v.bits); }
  static __device__ __forceinline__ Fp8E4M3 fromFloat(float v) { return {floatToF8e4m3(v)}; }
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

// Copies N elements with the widest accesses their bytes allow (16, 8 or 4 bytes at a time, else
// one element at a time); the caller's addresses are aligned to that width.
template <typename E, int N> __device__ __forceinline__ void copyElements(const E *src, E *dst) {
  constexpr int kBytes = static_cast<int>(N * sizeof(E));
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
  } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 8; ++i)
      reinterpret_cast<uint2 *>(dst)[i] = reinterpret_cast<const uint2 *>(src)[i];
  } else if constexpr (kBytes % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i)
      reinterpret_cast<unsigned int *>(dst)[i] = reinterpret_cast<const unsigned int *>(src)[i];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      dst[i] = src[i];
  }
}

template <typename A, typename B> struct IsSame { static constexpr bool value = false; };
template <typename A> struct IsSame<A, A> { static constexpr bool value = true; };

// A KV cache element and its layer's scale (plan.fbs KvCacheSpec.k_scales / v_scales): an fp8
// cache stores fromFloat(x / scale) and reads toFloat(e) * scale, as the CPU reference
// (kernels/cpu/rope_kv.cc, attention.cc); other cache types have a scale of 1 and convert as is.
template <typename KV> __device__ __forceinline__ float kvToFloat(KV e, float scale) {
  if constexpr (IsSame<KV, Fp8E4M3>::value)
    return toFloat<KV>(e) * scale;
  else
    return toFloat<KV>(e);
}
template <typename KV> __device__ __forceinline__ KV kvFromFloat(float x, float scale) {
  if constexpr (IsSame<KV, Fp8E4M3>::value)
    return fromFloat<KV>(x / scale);
  else
    return fromFloat<KV>(x);
}

// Select<c, A, B>::type: A when c, else B (NVRTC has no <type_traits>).
template <bool C, typename A, typename B> struct Select { using type = A; };
template <typename A, typename B> struct Select<false, A, B> { using type = B; };

// The larger of two element types (the activations' and the KV cache's).
template <typename A, typename B, bool = (sizeof(B) > sizeof(A))> struct WiderOf {
  using type = A;
};
template <typename A, typename B> struct WiderOf<A, B, true> { using type = B; };

// -inf without <cmath> (NVRTC has no INFINITY): the initial running max of a softmax.
__device__ __forceinline__ float negativeInfinity() {
  return __int_as_float(0xff800000);
}

// s -> tanh(s / c) * c when c > 0 (Gemma 2's attention and final logit soft-capping), in the CPU
// reference's order (kernels/cpu/softcap.h): divided by c, tanh, times c.
__device__ __forceinline__ float softcapScore(float s, float c) {
  return c > 0.0f ? tanhf(s / c) * c : s;
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

// Asynchronous copies from global to shared memory (sm_80 and later: cp.async, no register holds
// the bytes on their way). A thread's copies are committed in groups (asyncCopyCommit, an empty
// group is allowed) and asyncCopyWait<N>() returns once all but its newest N groups have landed;
// after that the issuing thread may read them, other threads only after a __syncthreads. Elsewhere
// (cudasim, older targets) the copy is a plain one, done on return, and commit/wait are no-ops.
template <int kBytes>
__device__ __forceinline__ void asyncCopy(void *sharedDst, const void *globalSrc) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async moves 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(sharedDst));
  if constexpr (kBytes == 16) // .cg: through L2 only, the bytes are read once
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(globalSrc) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(globalSrc), "n"(kBytes)
                 : "memory");
#else
  if constexpr (kBytes == 16)
    *static_cast<uint4 *>(sharedDst) = *static_cast<const uint4 *>(globalSrc);
  else if constexpr (kBytes == 8)
    *static_cast<uint2 *>(sharedDst) = *static_cast<const uint2 *>(globalSrc);
  else
    *static_cast<unsigned int *>(sharedDst) = *static_cast<const unsigned int *>(globalSrc);
#endif
}
__device__ __forceinline__ void asyncCopyCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void asyncCopyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
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
