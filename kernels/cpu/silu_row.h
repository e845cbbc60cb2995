// Internal to kiln_cpu_kernels: SiLU(gate) * up on 16 lanes (silu_row_avx512.cc), which
// elementwise.cc runs from the avx512 level up, and on 8 (silu_row_avx2.cc) at the avx2 level:
// g / (1 + e^-g) * up, as the baseline's 4-lane siluMulRow, but with e^x by fused multiply-adds
// (exp_fma_lanes.inc, exp_fma_avx2.inc; within 2 ulp of std::exp like the baseline's), so the level
// changes a result's last bits (tests/kernels/cpu/elementwise_test.cc holds every level to the
// double reference). bf16 rows are widened and rounded in registers.
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstdint>

namespace kiln::kernels::cpu {

// Rows [row0, row1) of siluMul; args.type is kF32 or kBF16.
void siluMulRowsAvx512(const SiluMulArgs &args, int64_t row0, int64_t row1);
// One fp32 row (a widened fp16 row).
void siluMulRowAvx512(const float *gate, const float *up, float *out, int64_t intermediate);
// exp_fma_lanes.inc's e^x over a run, for tests/kernels/cpu/vector_exp_test.cc.
void expFmaRunAvx512(const float *x, int64_t n, float *out);

// The same at the avx2 level (a CPU with AVX2 and FMA).
void siluMulRowsAvx2(const SiluMulArgs &args, int64_t row0, int64_t row1);
void siluMulRowAvx2(const float *gate, const float *up, float *out, int64_t intermediate);
void expFmaRunAvx2(const float *x, int64_t n, float *out);

} // namespace kiln::kernels::cpu
