// SiLU(gate) * up on 16 lanes (AVX-512), for silu_row.h. Built with -ffp-contract=off
// (kernels/cpu/CMakeLists.txt): the baseline's 4-lane loop has no fused multiply-add to use, so
// neither may this one, or the two levels would round differently.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/silu_row.h"

#include <cstring>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

using F32x16 = float __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));

#include "kernels/cpu/exp_lanes.inc"

inline F32x16 siluMul16(F32x16 g, F32x16 up) {
  return g / (1.0f + expLanes<F32x16, I32x16>(-g)) * up;
}

} // namespace

void siluMulRowAvx512(const float *gate, const float *up, float *out, int64_t intermediate) {
  int64_t i = 0;
  for (; i + 16 <= intermediate; i += 16) {
    F32x16 g, u;
    std::memcpy(&g, gate + i, sizeof(g));
    std::memcpy(&u, up + i, sizeof(u));
    const F32x16 y = siluMul16(g, u);
    std::memcpy(out + i, &y, sizeof(y));
  }
  if (i < intermediate) { // the partial last group, through the same lanes
    const int64_t n = intermediate - i;
    F32x16 g = {}, u = {};
    std::memcpy(&g, gate + i, n * sizeof(float));
    std::memcpy(&u, up + i, n * sizeof(float));
    const F32x16 y = siluMul16(g, u);
    std::memcpy(out + i, &y, n * sizeof(float));
  }
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
