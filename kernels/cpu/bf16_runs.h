// Internal to kiln_cpu_kernels: bf16 runs widened and rounded 16 lanes at a time on AVX-512
// (bf16_runs_avx512.cc), which weight_convert.h's weightRunToF32 (so elem_io.h's loadRun) and
// elem_io.h's storeRun call from the avx512 level up. Bits identical to kiln::bf16ToF32 /
// kiln::f32ToBf16 (nearest even, NaN kept quiet) at every length.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

void bf16RunToF32Avx512(const uint16_t *src, int64_t n, float *dst);
// fp8 E4M3 (runtime/base/fp8.h) widened 16 lanes at a time: the values of kiln::f8e4m3ToF32.
void f8e4m3RunToF32Avx512(const uint8_t *src, int64_t n, float *dst);
void f32RunToBf16Avx512(const float *src, int64_t n, uint16_t *dst);

} // namespace kiln::kernels::cpu
