// Attention's vector loops for AVX2 + FMA: 8 fp32 lanes, one fused multiply-add per product.
// Built as linear_avx2.cc is (its header explains why): `#pragma GCC target` after the includes,
// everything in an anonymous namespace; attention.cc calls these only when the CPU has AVX2 and
// FMA.
#include "kernels/cpu/attention_chunk.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif

namespace kiln::kernels::cpu::attention_chunk {
namespace {

#define KILN_ATTENTION_LANES 8
using V = float __attribute__((vector_size(4 * KILN_ATTENTION_LANES)));
inline V madd(V acc, V x, V w) {
  return _mm256_fmadd_ps(x, w, acc);
}

#include "kernels/cpu/attention_chunk.inc"
#undef KILN_ATTENTION_LANES

} // namespace

ChunkKernels chunkKernelsAvx2() {
  return {&scoreChunk, &accumulateValues};
}

} // namespace kiln::kernels::cpu::attention_chunk

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
