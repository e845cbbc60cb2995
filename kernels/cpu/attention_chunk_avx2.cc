// Attention's vector loops for AVX2 + FMA: 8 fp32 lanes, one fused multiply-add per product.
// Built as linear_avx2.cc is (its header explains why): KILN_TARGET_BEGIN (isa_target.h) after the
// includes, everything in an anonymous namespace; attention.cc calls these only when the CPU has
// AVX2 and FMA.
#include "kernels/cpu/attention_chunk.h"
#include "kernels/cpu/isa_target.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu::attention_chunk {
namespace {

#define KILN_ATTENTION_LANES 8
using V = float __attribute__((vector_size(4 * KILN_ATTENTION_LANES)));
inline V madd(V acc, V x, V w) {
  return _mm256_fmadd_ps(x, w, acc);
}

#include "kernels/cpu/exp_lanes.inc"

#include "kernels/cpu/attention_chunk.inc"
#undef KILN_ATTENTION_LANES

} // namespace

ChunkKernels chunkKernelsAvx2() {
  return {&scoreChunk, &exponentiate, &accumulateValues};
}

} // namespace kiln::kernels::cpu::attention_chunk

KILN_TARGET_END
