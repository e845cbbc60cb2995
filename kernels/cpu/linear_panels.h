// Internal to kiln_cpu_kernels: Linear with fp32, bf16 or fp16 weights in panels of two vectors of
// outputs (linear_panels_impl.inc): 32-output panels on AVX-512 (linear_panels_avx512.cc), which
// linear.cc runs at CpuIsa::kAvx512 and above, 16-output panels on AVX2 (linear_panels_avx2.cc) at
// CpuIsa::kAvx2. The two layouts differ: weights are packed for the level that runs them.
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::cpu {

// As linear(), for args.weightType kF32, kBF16 or (on a CPU with F16C) kF16 only. Reads
// args.packedWeight when set (the level's packPanels layout), else puts each block of weights in
// that layout as a task needs it.
void linearPanelsAvx512(const LinearArgs &args);
void linearPanelsAvx2(const LinearArgs &args);

// The panel layout of [outFeatures, inFeatures] fp32, bf16 or fp16 weights (`type`, kept as stored)
// at each level: its size, and the packing.
size_t packedPanelBytesAvx512(WeightType type, int32_t outFeatures, int32_t inFeatures);
void packPanelsAvx512(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                      void *packed);
size_t packedPanelBytesAvx2(WeightType type, int32_t outFeatures, int32_t inFeatures);
void packPanelsAvx2(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                    void *packed);

} // namespace kiln::kernels::cpu
