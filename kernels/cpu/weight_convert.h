// Internal to kiln_cpu_kernels: widening of fp16/bf16 weight runs to fp32, written branch-free so
// the compiler vectorises it. Results are bit-identical to kiln::f16ToF32 / kiln::bf16ToF32.
#pragma once

#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"

#include "runtime/base/fp8.h"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

namespace kiln::kernels::cpu {

inline void bf16RunToF32(const uint16_t *src, int64_t n, float *dst) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

// Shifting exponent+mantissa into fp32 position and multiplying by 2^(127-15) rebiases normals
// and normalises subnormals exactly (fp32 has the range for both); only Inf/NaN need a select.
inline void f16RunToF32(const uint16_t *src, int64_t n, float *dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t h = src[i];
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t magnitude = (h & 0x7fffu) << 13;
    uint32_t scaled = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) * 0x1p112f);
    uint32_t infNan = 0u - static_cast<uint32_t>((h & 0x7c00u) == 0x7c00u); // all ones or zero
    uint32_t bits = (scaled & ~infNan) | ((magnitude | 0x7f800000u) & infNan);
    dst[i] = std::bit_cast<float>(bits | sign);
  }
}

// fp8 E4M3 (runtime/base/fp8.h) widened through a table of the 256 values.
inline void f8e4m3RunToF32(const uint8_t *src, int64_t n, float *dst) {
  static const auto table = [] {
    std::array<float, 256> values{};
    for (int b = 0; b < 256; ++b)
      values[size_t(b)] = f8e4m3ToF32(static_cast<uint8_t>(b));
    return values;
  }();
  for (int64_t i = 0; i < n; ++i)
    dst[i] = table[src[i]];
}

// dst[0..n) = fp32 of elements [offset, offset + n) of a weight array of the given type.
inline void weightRunToF32(const void *weights, WeightType type, int64_t offset, int64_t n,
                           float *dst) {
  switch (type) {
  case WeightType::kF32:
    std::memcpy(dst, static_cast<const float *>(weights) + offset, n * sizeof(float));
    return;
  case WeightType::kF16:
    f16RunToF32(static_cast<const uint16_t *>(weights) + offset, n, dst);
    return;
  case WeightType::kBF16:
    if (n >= 16 && activeCpuIsa() >= CpuIsa::kAvx512) // the same bits, 16 lanes at a time
      return bf16RunToF32Avx512(static_cast<const uint16_t *>(weights) + offset, n, dst);
    bf16RunToF32(static_cast<const uint16_t *>(weights) + offset, n, dst);
    return;
  case WeightType::kF8E4M3:
    if (n >= 16 && activeCpuIsa() >= CpuIsa::kAvx512) // the same values, 16 lanes at a time
      return f8e4m3RunToF32Avx512(static_cast<const uint8_t *>(weights) + offset, n, dst);
    f8e4m3RunToF32(static_cast<const uint8_t *>(weights) + offset, n, dst);
    return;
  }
}

} // namespace kiln::kernels::cpu
