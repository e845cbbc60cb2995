// Internal to kiln_cpu_kernels: rows of rmsNorm / addRmsNorm on 16 lanes (norm_rows_avx512.cc),
// which norm.cc runs from the avx512 level up for fp32 and bf16 rows, and on 8
// (norm_rows_avx2.cc) at the avx2 level. The same operations as norm.cc's baseline (sum of
// squares, its mean plus eps, one over its square root, then weight * (x * inverse); a bf16
// residual read back as stored), with the squares summed in double: the level changes the sum, so
// a row's bits may differ between levels (tests/kernels/cpu/norm_test.cc holds every level to the
// double reference), never between batches.
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstdint>

namespace kiln::kernels::cpu {

// Rows [row0, row1); args.type is kF32 or kBF16.
void rmsNormRowsAvx512(const RmsNormArgs &args, int64_t row0, int64_t row1);
void addRmsNormRowsAvx512(const AddRmsNormArgs &args, int64_t row0, int64_t row1);
// The same at the avx2 level (a CPU with AVX2 and FMA).
void rmsNormRowsAvx2(const RmsNormArgs &args, int64_t row0, int64_t row1);
void addRmsNormRowsAvx2(const AddRmsNormArgs &args, int64_t row0, int64_t row1);

} // namespace kiln::kernels::cpu
