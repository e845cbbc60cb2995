// SiLU(gate) * up on 8 lanes (AVX2 + FMA), for silu_row.h: silu_row_avx512.cc's operations at half
// the width, e^x from exp_fma_avx2.inc, bf16 rows widened and rounded in registers
// (bf16_lanes_avx2.inc). A row's last partial group of 8 runs through the same lanes, so every
// element gets the same arithmetic. Built as linear_avx2.cc is: only this file's functions target
// AVX2.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/silu_row.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/bf16_lanes_avx2.inc"

#include "kernels/cpu/exp_fma_avx2.inc"

// g / (1 + e^-g) * up: e^-g overflowing to inf for g < -88.7 still gives -0.
__m256 siluMul8(__m256 g, __m256 up) {
  const __m256 e = expFma8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

template <bool kBf16> void siluMulRows(const SiluMulArgs &args, int64_t row0, int64_t row1) {
  const int64_t n = args.intermediate, bytes = kBf16 ? 2 : 4;
  for (int64_t r = row0; r < row1; ++r) {
    const auto *gate = static_cast<const uint8_t *>(args.gateUp) + r * 2 * n * bytes;
    const auto *up = gate + n * bytes;
    void *out = static_cast<uint8_t *>(args.out) + r * n * bytes;
    for (int64_t i = 0; i < n; i += 8)
      storeLanes8<kBf16>(out, i, n,
                         siluMul8(loadLanes8<kBf16>(gate, i, n), loadLanes8<kBf16>(up, i, n)));
  }
}

} // namespace

void siluMulRowsAvx2(const SiluMulArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return siluMulRows<true>(args, row0, row1);
  siluMulRows<false>(args, row0, row1);
}

void siluMulRowAvx2(const float *gate, const float *up, float *out, int64_t intermediate) {
  for (int64_t i = 0; i < intermediate; i += 8)
    storeLanes8<false>(
        out, i, intermediate,
        siluMul8(loadLanes8<false>(gate, i, intermediate), loadLanes8<false>(up, i, intermediate)));
}

void expFmaRunAvx2(const float *x, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i += 8)
    storeLanes8<false>(out, i, n, expFma8(loadLanes8<false>(x, i, n)));
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
