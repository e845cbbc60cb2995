// Forced in front (-include) of every kernel translation unit cudasim compiles on the host: the
// CUDA C++ keywords, built-in variables and device functions that kernels/cuda uses, mapped onto
// the grid runner (device_abi.h). Blocks run one at a time, so a __shared__ variable is a
// function-local static: every thread of the running block sees the same object.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "tools/cudasim/device/device_abi.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

#define threadIdx (kiln_cudasim_api->current()->threadIdx)
#define blockIdx (kiln_cudasim_api->current()->blockIdx)
#define blockDim (kiln_cudasim_api->current()->blockDim)
#define gridDim (kiln_cudasim_api->current()->gridDim)
#define warpSize 32

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return uint4{x, y, z, w};
}
struct alignas(8) uint2 {
  unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) {
  return uint2{x, y};
}
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return float4{x, y, z, w};
}

inline void __syncthreads() {
  kiln_cudasim_api->syncThreads();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  kiln_cudasim_api->syncWarp(mask);
}
[[noreturn]] inline void __trap() {
  kiln_cudasim_api->trap("__trap()");
}

namespace kiln_cudasim_detail {
template <typename T> unsigned toBits(T value) {
  static_assert(sizeof(T) == 4, "cudasim shuffles 32-bit values");
  unsigned bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
template <typename T> T fromBits(unsigned bits) {
  T value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline int laneId() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return static_cast<int>(linear % 32);
}
// The lane a shuffle reads within its `width`-lane segment; out-of-segment reads return the own
// value, as PTX shfl.sync's clamp does.
template <typename T> T shuffleFrom(unsigned mask, T value, int source, bool inSegment) {
  const int lane = laneId();
  return fromBits<T>(kiln_cudasim_api->shuffle(mask, toBits(value), inSegment ? source : lane));
}
} // namespace kiln_cudasim_detail

template <typename T> T __shfl_xor_sync(unsigned mask, T value, int laneMask, int width = 32) {
  const int lane = kiln_cudasim_detail::laneId();
  const int source = lane ^ laneMask;
  return kiln_cudasim_detail::shuffleFrom(mask, value, source,
                                          source / width == lane / width || source < lane);
}
template <typename T> T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const int lane = kiln_cudasim_detail::laneId();
  const int source = lane + static_cast<int>(delta);
  return kiln_cudasim_detail::shuffleFrom(mask, value, source, source / width == lane / width);
}
template <typename T> T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const int lane = kiln_cudasim_detail::laneId();
  const int source = lane - static_cast<int>(delta);
  return kiln_cudasim_detail::shuffleFrom(mask, value, source,
                                          source >= 0 && source / width == lane / width);
}
template <typename T> T __shfl_sync(unsigned mask, T value, int sourceLane, int width = 32) {
  const int lane = kiln_cudasim_detail::laneId();
  const int source = (lane / width) * width + ((sourceLane % width) + width) % width;
  return kiln_cudasim_detail::shuffleFrom(mask, value, source, true);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return kiln_cudasim_api->ballot(mask, predicate);
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return (__ballot_sync(mask, predicate) & mask) == mask;
}

inline float __int_as_float(int bits) {
  return kiln_cudasim_detail::fromBits<float>(static_cast<unsigned>(bits));
}
inline int __float_as_int(float value) {
  return static_cast<int>(kiln_cudasim_detail::toBits(value));
}
// A load through the read-only data path: on the host, a plain load.
template <typename T> T __ldg(const T *address) {
  return *address;
}
inline float __expf(float x) {
  return expf(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}

// CUDA's integer min/max overloads (floats use fminf/fmaxf from math.h).
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}

// Blocks run one at a time on one OS thread, so atomics need no hardware support.
template <typename T> T atomicAdd(T *address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <typename T> T atomicMax(T *address, T value) {
  T old = *address;
  *address = old > value ? old : value;
  return old;
}
