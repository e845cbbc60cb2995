// Internal to kiln_cpu_kernels: Linear with bf16 weights on AMX tiles (linear_amx.cc), which
// linear.cc runs at CpuIsa::kAmx.
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstddef>
#include <cstdint>

namespace kiln::kernels::cpu {

// As linear(), for args.weightType == kBF16 only; x is rounded to bf16. Reads
// args.packedWeight when set (packAmxWeights' layout), else packs each group of 16 weight rows
// as it needs it. Only on a CPU whose detected level is kAmx (cpu_isa.cc has asked Linux for the
// tile data).
void linearAmx(const LinearArgs &args);

// The tile layout of [outFeatures, inFeatures] bf16 weights: its size, and the packing.
size_t packedAmxWeightBytes(int32_t outFeatures, int32_t inFeatures);
void packAmxWeights(const uint16_t *weight, int32_t outFeatures, int32_t inFeatures, void *packed);

} // namespace kiln::kernels::cpu
