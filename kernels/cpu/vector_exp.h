// Internal to kiln_cpu_kernels: e^x on fp32 lanes (4 at the x86-64 baseline, SSE2), for SiLU,
// where one scalar std::exp per element bounded the loop. (Attention's 4- and 8-lane loops measured
// no faster with it and keep std::exp; the 16-lane ones, attention_chunk_avx512.cc, and
// attention_amx.cc run exp_lanes.inc on 16 lanes.)
#pragma once

#include "kernels/cpu/vector4.h"

#include <cstdint>

namespace kiln::kernels::cpu {

namespace exp_lanes {
#include "kernels/cpu/exp_lanes.inc"
} // namespace exp_lanes

inline F32x4 expF32x4(F32x4 x) {
  return exp_lanes::expLanes<F32x4, I32x4>(x);
}

} // namespace kiln::kernels::cpu
