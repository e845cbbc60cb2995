// Internal to kiln_cpu_kernels: attention on AMX tiles (attention_amx.cc), which attention.cc runs
// at CpuIsa::kAmx when attentionRunsOnAmx says it can.
#pragma once

#include "kernels/cpu/kernels.h"

namespace kiln::kernels::cpu {

// bf16 queries and output, a bf16 cache, headDim a multiple of 32 and blockSize of 16.
bool attentionRunsOnAmx(const AttentionArgs &args);
// As attention() (fp32 math up to summation order). Only on a CPU whose detected level is kAmx.
void attentionAmx(const AttentionArgs &args);

} // namespace kiln::kernels::cpu
