// Internal to kiln_cpu_kernels: fp32 attention with a (token, head) pair per vector lane
// (attention_f32_avx512.cc), which attention.cc runs from CpuIsa::kAvx512 up when
// attentionRunsOnF32Lanes says it can.
#pragma once

#include "kernels/cpu/kernels.h"

namespace kiln::kernels::cpu {

// headDim and blockSize multiples of 16 (queries, output and cache of any ElemType).
bool attentionRunsOnF32Lanes(const AttentionArgs &args);
// As attention(), up to summation order. Only on a CPU whose detected level is kAvx512 or above.
void attentionF32Lanes(const AttentionArgs &args);

} // namespace kiln::kernels::cpu
