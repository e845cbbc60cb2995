// Internal to kiln_cpu_kernels: fp32 attention with a (token, head) pair per vector lane, which
// attention.cc runs where attentionRunsOnF32Lanes says it can: attention_f32_avx512.cc from
// CpuIsa::kAvx512 up, attention_f32_avx2.cc at kAvx2.
#pragma once

#include "kernels/cpu/kernels.h"

namespace kiln::kernels::cpu {

// headDim and blockSize multiples of 16 (queries, output and cache of any ElemType).
inline bool attentionRunsOnF32Lanes(const AttentionArgs &args) {
  return args.headDim > 0 && args.headDim % 16 == 0 && args.blockSize % 16 == 0;
}
// As attention(), up to summation order. Only on a CPU whose detected level is kAvx512 or above.
void attentionF32LanesAvx512(const AttentionArgs &args);
// The same for a CPU with AVX2 and FMA (detected level kAvx2 or above).
void attentionF32LanesAvx2(const AttentionArgs &args);

} // namespace kiln::kernels::cpu
