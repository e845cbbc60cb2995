// Rotary cosines and sines on 8 lanes of double (AVX-512), for rope_angles.h. Built as
// linear_avx512.cc is: only this file's functions target AVX-512.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/rope_angles.h"

#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

// pi / 2 = kHalfPi1 + kHalfPi2 + kHalfPi3 (the first two are the double nearest pi / 2 and the
// double nearest the rest); an fp32 angle's k = round(angle / (pi / 2)) stays below 2^25, so
// k * kHalfPi3 is below 1e-25 and r = angle - k pi / 2 is within 1e-16 of exact.
constexpr double kHalfPi1 = 1.5707963267948966;
constexpr double kHalfPi2 = 6.123233995736766e-17;
constexpr double kHalfPi3 = -1.4973849048591698e-33;

// sin r and cos r for |r| <= pi / 4: Taylor series to r^15 and r^16 (the next terms below 5e-17).
void sinCosReduced(__m512d r, __m512d &sine, __m512d &cosine) {
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d s = _mm512_set1_pd(-1.0 / 1307674368000.0); // -1/15!
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(1.0 / 6227020800.0));
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(-1.0 / 39916800.0));
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(1.0 / 362880.0));
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(-1.0 / 5040.0));
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(1.0 / 120.0));
  s = _mm512_fmadd_pd(s, r2, _mm512_set1_pd(-1.0 / 6.0));
  sine = _mm512_fmadd_pd(_mm512_mul_pd(s, r2), r, r);
  __m512d c = _mm512_set1_pd(1.0 / 20922789888000.0); // 1/16!
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(-1.0 / 87178291200.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(1.0 / 479001600.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(-1.0 / 3628800.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(1.0 / 40320.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(-1.0 / 720.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(1.0 / 24.0));
  c = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(-0.5));
  cosine = _mm512_fmadd_pd(c, r2, _mm512_set1_pd(1.0));
}

// Eight angles (fp32, widened exactly) to their cosines and sines rounded to fp32.
void cosSin8(__m256 angles, __m256 &cosines, __m256 &sines) {
  const __m512d a = _mm512_cvtps_pd(angles);
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(a, _mm512_set1_pd(0.63661977236758134)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kHalfPi1), a);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kHalfPi2), r);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kHalfPi3), r);
  __m512d s, c;
  sinCosReduced(r, s, c);
  // Quadrant q = k mod 4: sin = (s, c, -s, -c)[q], cos = (c, -s, -c, s)[q].
  const __m256i q = _mm512_cvtpd_epi32(k);
  const __mmask8 odd = _mm256_test_epi32_mask(q, _mm256_set1_epi32(1));
  const __mmask8 sinNegative = _mm256_test_epi32_mask(q, _mm256_set1_epi32(2));
  const __mmask8 cosNegative =
      _mm256_test_epi32_mask(_mm256_add_epi32(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(2));
  __m512d sine = _mm512_mask_blend_pd(odd, s, c), cosine = _mm512_mask_blend_pd(odd, c, s);
  const __m512d zero = _mm512_setzero_pd();
  sine = _mm512_mask_sub_pd(sine, sinNegative, zero, sine);
  cosine = _mm512_mask_sub_pd(cosine, cosNegative, zero, cosine);
  cosines = _mm512_cvtpd_ps(cosine);
  sines = _mm512_cvtpd_ps(sine);
}

} // namespace

void cosSinAvx512(const float *angles, int32_t n, float *cosines, float *sines) {
  for (int32_t i = 0; i < n; i += 8) {
    const __mmask8 lanes = n - i >= 8 ? __mmask8(0xff) : __mmask8((1u << (n - i)) - 1);
    __m256 c, s;
    cosSin8(_mm256_maskz_loadu_ps(lanes, angles + i), c, s);
    _mm256_mask_storeu_ps(cosines + i, lanes, c);
    _mm256_mask_storeu_ps(sines + i, lanes, s);
  }
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
