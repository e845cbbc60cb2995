// SiLU(gate) * up on 16 lanes (AVX-512), for silu_row.h. Built as linear_avx512.cc is: only this
// file's functions target AVX-512.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/silu_row.h"

#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/bf16_lanes.inc"

#include "kernels/cpu/exp_fma_lanes.inc"

// g / (1 + e^-g) * up: e^-g overflowing to inf for g < -88.7 still gives -0.
__m512 siluMul16(__m512 g, __m512 up) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = expFmaLanes(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), up);
}

template <bool kBf16> void siluMulRows(const SiluMulArgs &args, int64_t row0, int64_t row1) {
  const int64_t n = args.intermediate, bytes = kBf16 ? 2 : 4;
  for (int64_t r = row0; r < row1; ++r) {
    const auto *gate = static_cast<const uint8_t *>(args.gateUp) + r * 2 * n * bytes;
    const auto *up = gate + n * bytes;
    void *out = static_cast<uint8_t *>(args.out) + r * n * bytes;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 lanes = lanesAt(i, n);
      storeLanes<kBf16>(
          out, i, lanes,
          siluMul16(loadLanes<kBf16>(gate, i, lanes), loadLanes<kBf16>(up, i, lanes)));
    }
  }
}

} // namespace

void siluMulRowsAvx512(const SiluMulArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return siluMulRows<true>(args, row0, row1);
  siluMulRows<false>(args, row0, row1);
}

void siluMulRowAvx512(const float *gate, const float *up, float *out, int64_t intermediate) {
  for (int64_t i = 0; i < intermediate; i += 16) {
    const __mmask16 lanes = lanesAt(i, intermediate);
    _mm512_mask_storeu_ps(
        out + i, lanes,
        siluMul16(_mm512_maskz_loadu_ps(lanes, gate + i), _mm512_maskz_loadu_ps(lanes, up + i)));
  }
}

void expFmaRunAvx512(const float *x, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanesAt(i, n);
    _mm512_mask_storeu_ps(out + i, lanes, expFmaLanes(_mm512_maskz_loadu_ps(lanes, x + i)));
  }
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
