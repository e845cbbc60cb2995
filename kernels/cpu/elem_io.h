// Internal to kiln_cpu_kernels: moving rows of fp32/fp16/bf16 buffers to and from fp32 scratch.
// Kernels that meet a half buffer widen a row (or a tile) once, compute exactly as their fp32 path
// does, and round each output element once when storing it; the type is switched on per row, never
// per element. Rounding is bit-identical to kiln::f32ToF16 / kiln::f32ToBf16 (nearest even). bf16
// runs of 16 elements or more are widened (weight_convert.h) and rounded 16 lanes at a time from
// the avx512 level up (bf16_runs.h).
#pragma once

#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/weight_convert.h"
#include "runtime/base/fp8.h"
#include "runtime/base/half.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::kernels::cpu {

inline int64_t elemBytes(ElemType type) {
  return type == ElemType::kF32 ? 4 : type == ElemType::kF8E4M3 ? 1 : 2;
}

// dst[0..n) = fp32 of elements [offset, offset + n) of `base`.
inline void loadRun(const void *base, ElemType type, int64_t offset, int64_t n, float *dst) {
  weightRunToF32(base, type, offset, n, dst);
}

// Elements [offset, offset + n) of `base` = src[0..n) rounded to `type`.
inline void storeRun(const float *src, int64_t n, void *base, ElemType type, int64_t offset) {
  switch (type) {
  case ElemType::kF32:
    std::memcpy(static_cast<float *>(base) + offset, src, n * sizeof(float));
    return;
  case ElemType::kBF16: {
    uint16_t *dst = static_cast<uint16_t *>(base) + offset;
    if (n >= 16 && activeCpuIsa() >= CpuIsa::kAvx512)
      return f32RunToBf16Avx512(src, n, dst);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f32ToBf16(src[i]);
    return;
  }
  case ElemType::kF16: {
    uint16_t *dst = static_cast<uint16_t *>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f32ToF16(src[i]);
    return;
  }
  case ElemType::kF8E4M3: { // a KV cache's new rows: a few per token
    uint8_t *dst = static_cast<uint8_t *>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f32ToF8E4M3(src[i]);
    return;
  }
  }
}

// A KV cache's elements and its layer's scale (plan.fbs KvCacheSpec.k_scales / v_scales): loadRun
// then each value times `scale`, one fp32 product (a scale of 1 changes nothing).
inline void loadScaledRun(const void *base, ElemType type, int64_t offset, int64_t n, float scale,
                          float *dst) {
  loadRun(base, type, offset, n, dst);
  if (scale != 1.0f)
    for (int64_t i = 0; i < n; ++i)
      dst[i] *= scale;
}
// storeRun of values[i] / scale, each quotient one fp32 division taken in place in `values`.
inline void storeScaledRun(float *values, int64_t n, float scale, void *base, ElemType type,
                           int64_t offset) {
  if (scale != 1.0f)
    for (int64_t i = 0; i < n; ++i)
      values[i] /= scale;
  storeRun(values, n, base, type, offset);
}

// Copies elements [srcOffset, +n) of `src` (srcType) to [dstOffset, +n) of `dst` (dstType):
// bytes when the types agree (widening then rounding to the same type is the identity), else
// through `scratch` (n floats).
inline void convertRun(const void *src, ElemType srcType, int64_t srcOffset, void *dst,
                       ElemType dstType, int64_t dstOffset, int64_t n, float *scratch) {
  if (srcType == dstType) {
    const int64_t bytes = elemBytes(srcType);
    std::memcpy(static_cast<uint8_t *>(dst) + dstOffset * bytes,
                static_cast<const uint8_t *>(src) + srcOffset * bytes, n * bytes);
    return;
  }
  loadRun(src, srcType, srcOffset, n, scratch);
  storeRun(scratch, n, dst, dstType, dstOffset);
}

// This thread's fp32 scratch of at least `floats` elements. It grows to the largest request and is
// then reused: the worker pool's threads persist (worker_pool.h), so it is allocated once per
// thread, not per step. One buffer per thread: a kernel carves all its scratch arrays out of a
// single call.
inline float *threadScratch(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats)
    buffer.resize(floats);
  return buffer.data();
}

} // namespace kiln::kernels::cpu
