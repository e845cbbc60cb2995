// Rotary cosines and sines on 4 lanes of double (AVX2 + FMA), for rope_angles.h: the arithmetic of
// rope_angles_avx512.cc, operation for operation, so both levels give the same bits. Built as
// linear_avx2.cc is: only this file's functions target AVX2.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/rope_angles.h"

#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu {
namespace {

// pi / 2 in three parts, as in rope_angles_avx512.cc.
constexpr double kHalfPi1 = 1.5707963267948966;
constexpr double kHalfPi2 = 6.123233995736766e-17;
constexpr double kHalfPi3 = -1.4973849048591698e-33;

// sin r and cos r for |r| <= pi / 4: the Taylor series of rope_angles_avx512.cc.
void sinCosReduced(__m256d r, __m256d &sine, __m256d &cosine) {
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d s = _mm256_set1_pd(-1.0 / 1307674368000.0); // -1/15!
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 6227020800.0));
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 39916800.0));
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 362880.0));
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 5040.0));
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(1.0 / 120.0));
  s = _mm256_fmadd_pd(s, r2, _mm256_set1_pd(-1.0 / 6.0));
  sine = _mm256_fmadd_pd(_mm256_mul_pd(s, r2), r, r);
  __m256d c = _mm256_set1_pd(1.0 / 20922789888000.0); // 1/16!
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 87178291200.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 479001600.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 3628800.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 40320.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-1.0 / 720.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0 / 24.0));
  c = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(-0.5));
  cosine = _mm256_fmadd_pd(c, r2, _mm256_set1_pd(1.0));
}

// All-ones in the 64-bit lanes whose 32-bit q has a bit of `bit` set.
__m256d lanesWith(__m128i q, int bit) {
  const __m128i b = _mm_set1_epi32(bit);
  return _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpeq_epi32(_mm_and_si128(q, b), b)));
}

// Four angles (fp32, widened exactly) to their cosines and sines rounded to fp32.
void cosSin4(__m128 angles, __m128 &cosines, __m128 &sines) {
  const __m256d a = _mm256_cvtps_pd(angles);
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(0.63661977236758134)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kHalfPi1), a);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kHalfPi2), r);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kHalfPi3), r);
  __m256d s, c;
  sinCosReduced(r, s, c);
  // Quadrant q = k mod 4: sin = (s, c, -s, -c)[q], cos = (c, -s, -c, s)[q]; a negation is 0 - x,
  // as the AVX-512 file's masked subtraction.
  const __m128i q = _mm256_cvtpd_epi32(k);
  const __m256d odd = lanesWith(q, 1);
  const __m256d sinNegative = lanesWith(q, 2);
  const __m256d cosNegative = lanesWith(_mm_add_epi32(q, _mm_set1_epi32(1)), 2);
  __m256d sine = _mm256_blendv_pd(s, c, odd), cosine = _mm256_blendv_pd(c, s, odd);
  const __m256d zero = _mm256_setzero_pd();
  sine = _mm256_blendv_pd(sine, _mm256_sub_pd(zero, sine), sinNegative);
  cosine = _mm256_blendv_pd(cosine, _mm256_sub_pd(zero, cosine), cosNegative);
  cosines = _mm256_cvtpd_ps(cosine);
  sines = _mm256_cvtpd_ps(sine);
}

} // namespace

void cosSinAvx2(const float *angles, int32_t n, float *cosines, float *sines) {
  // Plain loops for the tail: a std:: template instantiated here would be built for AVX2 and could
  // be the copy a baseline caller links to (isa_target.h).
  for (int32_t i = 0; i < n; i += 4) {
    __m128 c, s;
    if (n - i >= 4) {
      cosSin4(_mm_loadu_ps(angles + i), c, s);
      _mm_storeu_ps(cosines + i, c);
      _mm_storeu_ps(sines + i, s);
      continue;
    }
    alignas(16) float in[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs[4], ss[4];
    for (int32_t l = 0; l < n - i; ++l)
      in[l] = angles[i + l];
    cosSin4(_mm_load_ps(in), c, s);
    _mm_store_ps(cs, c);
    _mm_store_ps(ss, s);
    for (int32_t l = 0; l < n - i; ++l) {
      cosines[i + l] = cs[l];
      sines[i + l] = ss[l];
    }
  }
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
