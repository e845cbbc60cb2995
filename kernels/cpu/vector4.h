// Internal to kiln_cpu_kernels: 4-lane fp32 vectors at the x86-64 baseline (SSE2), as GCC/clang
// vector extensions, for the kernels built for the baseline only (elementwise.cc, vector_exp.h).
// The Linear tiles and attention's loops have their own per-ISA widths (linear_impl.inc,
// attention_chunk.inc).
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::kernels::cpu {

using F32x4 = float __attribute__((vector_size(16)));
using I32x4 = int32_t __attribute__((vector_size(16)));

// Unaligned load and store of 4 floats.
inline F32x4 loadF32x4(const float *p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void storeF32x4(float *p, F32x4 v) {
  std::memcpy(p, &v, sizeof(v));
}

} // namespace kiln::kernels::cpu
