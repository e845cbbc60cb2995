// bf16 runs to and from fp32 on 16 lanes (AVX-512 F + BW, bf16_lanes.inc), for elem_io.h: the half
// activations' rows that SiLU, rope and attention widen and round (4 lanes at the baseline, a
// tenth of a bf16 prefill's time); and an fp8 KV cache's rows widened. Built as linear_avx512.cc
// is: only this file's functions target AVX-512.
#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/isa_target.h"

#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/bf16_lanes.inc"

} // namespace

void bf16RunToF32Avx512(const uint16_t *src, int64_t n, float *dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i,
                     widen(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i))));
  if (i < n) {
    const __mmask16 lanes = firstLanes(n - i);
    _mm512_mask_storeu_ps(dst + i, lanes, widen(_mm256_maskz_loadu_epi16(lanes, src + i)));
  }
}

void f32RunToBf16Avx512(const float *src, int64_t n, uint16_t *dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), round(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 lanes = firstLanes(n - i);
    _mm256_mask_storeu_epi16(dst + i, lanes, round(_mm512_maskz_loadu_ps(lanes, src + i)));
  }
}

// E4M3 bits moved into fp16 position (sign to bit 15, exponent and mantissa shifted by 7) are the
// fp16 value 2^-8 times the fp8 one, normals and subnormals alike (fp16 has the range); so widen
// and multiply by 256. S.1111.111 (NaN) is selected apart.
void f8e4m3RunToF32Avx512(const uint8_t *src, int64_t n, float *dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : firstLanes(n - i);
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, src + i));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(bytes, _mm512_set1_epi32(0x80)), 8);
    const __m512i magnitude = _mm512_and_si512(bytes, _mm512_set1_epi32(0x7F));
    const __m512i halves = _mm512_or_si512(sign, _mm512_slli_epi32(magnitude, 7));
    __m512 values =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(halves)), _mm512_set1_ps(256.0f));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7F));
    values = _mm512_mask_blend_ps(nan, values, _mm512_set1_ps(__builtin_nanf("")));
    _mm512_mask_storeu_ps(dst + i, lanes, values);
  }
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
