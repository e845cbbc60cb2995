// Internal to kiln_cpu_kernels: SiLU(gate) * up over one row, per instruction-set level.
// elementwise.cc's siluMulRow (4 lanes, the baseline) and silu_row_avx512.cc's (16 lanes) do the
// very same IEEE operations per element (exp_lanes.inc, then g / (1 + e) * up, no fused
// multiply-adds), so both give the same bits: the level changes the speed, not the result.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

void siluMulRowAvx512(const float *gate, const float *up, float *out, int64_t intermediate);

} // namespace kiln::kernels::cpu
