// Internal to kiln_cpu_kernels: Linear with fp32 weights in 32-output panels on AVX-512
// (linear_panels_avx512.cc), which linear.cc runs at CpuIsa::kAvx512 and above.
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::cpu {

// As linear(), for args.weightType == kF32 only. Reads args.packedWeight when set (packPanels'
// layout), else puts each block of weights in that layout as a task needs it.
void linearPanels(const LinearArgs &args);

// The panel layout of [outFeatures, inFeatures] fp32 weights: its size, and the packing.
size_t packedPanelBytes(int32_t outFeatures, int32_t inFeatures);
void packPanels(const float *weight, int32_t outFeatures, int32_t inFeatures, void *packed);

} // namespace kiln::kernels::cpu
