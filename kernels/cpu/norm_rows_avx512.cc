// rmsNorm / addRmsNorm rows on 16 lanes (AVX-512), for norm_rows.h: a bf16 row is widened in
// registers and each output rounded there (bf16_lanes.inc), with no fp32 copy of the row. Built as
// linear_avx512.cc is: only this file's functions target AVX-512.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/norm_rows.h"

#include <cmath>
#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/bf16_lanes.inc"

// v as a row of the type holds it: rounded to bf16 and widened back, or itself.
template <bool kBf16> __m512 asStored(__m512 v) {
  if constexpr (kBf16)
    return widen(round(v));
  else
    return v;
}

// sums (8 doubles) + the squares of v's 16 lanes: lanes i and i + 8 on double lane i.
__m512d addSquares(__m512 v, __m512d sums) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  const __m512d hi =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return _mm512_fmadd_pd(hi, hi, _mm512_fmadd_pd(lo, lo, sums));
}

// 1 / sqrt(mean of the squares + eps), as norm.cc's rmsNormRow.
float inverseRms(__m512d sumSquares, int32_t hidden, float eps) {
  const float variance =
      static_cast<float>(_mm512_reduce_add_pd(sumSquares)) / static_cast<float>(hidden);
  return 1.0f / std::sqrt(variance + eps);
}

// The squares of a row's 16-element chunks are summed in double (exact products, fp64 sums: the
// fp32 sum on 16 lanes moved SmolLM2's logits further from transformers', 1.02e-4 against the
// 9.3e-5 of the baseline's 4 lanes; 1.0e-4 is the goldens' bound) on two sets of lanes, even
// chunks on the first, odd ones on the second (both functions below), then added and rounded to
// fp32 once.
template <bool kBf16> __m512d sumSquares(const void *x, int32_t hidden) {
  __m512d even = _mm512_setzero_pd(), odd = _mm512_setzero_pd();
  for (int64_t i = 0; i < hidden; i += 32) {
    const __m512 u = loadLanes<kBf16>(x, i, lanesAt(i, hidden));
    even = addSquares(u, even);
    if (i + 16 < hidden) {
      const __m512 v = loadLanes<kBf16>(x, i + 16, lanesAt(i + 16, hidden));
      odd = addSquares(v, odd);
    }
  }
  return _mm512_add_pd(even, odd);
}

// out = weight * (x * inverse), each element rounded once when stored.
template <bool kBf16>
void scaleRow(const void *x, float inverse, const float *weight, void *out, int32_t hidden) {
  const __m512 factor = _mm512_set1_ps(inverse);
  for (int64_t i = 0; i < hidden; i += 16) {
    const __mmask16 lanes = lanesAt(i, hidden);
    const __m512 v = _mm512_mul_ps(loadLanes<kBf16>(x, i, lanes), factor);
    storeLanes<kBf16>(out, i, lanes, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, weight + i), v));
  }
}

template <bool kBf16> void rmsNormRows(const RmsNormArgs &args, int64_t row0, int64_t row1) {
  const int64_t bytes = kBf16 ? 2 : 4, rowBytes = int64_t(args.hidden) * bytes;
  for (int64_t r = row0; r < row1; ++r) {
    const void *x = static_cast<const uint8_t *>(args.x) + r * rowBytes;
    const float inverse = inverseRms(sumSquares<kBf16>(x, args.hidden), args.hidden, args.eps);
    scaleRow<kBf16>(x, inverse, args.weight, static_cast<uint8_t *>(args.out) + r * rowBytes,
                    args.hidden);
  }
}

// residual += x, stored (rounded once); its squares summed as stored; then the norm of the row
// as stored.
template <bool kBf16> void addRmsNormRows(const AddRmsNormArgs &args, int64_t row0, int64_t row1) {
  const int64_t bytes = kBf16 ? 2 : 4, rowBytes = int64_t(args.hidden) * bytes;
  for (int64_t r = row0; r < row1; ++r) {
    const void *x = static_cast<const uint8_t *>(args.x) + r * rowBytes;
    void *residual = static_cast<uint8_t *>(args.residual) + r * rowBytes;
    // residual + x for elements [i, i + 16), stored; returns the sum as stored.
    auto addChunk = [&](int64_t i) {
      const __mmask16 lanes = lanesAt(i, args.hidden);
      const __m512 sum =
          _mm512_add_ps(loadLanes<kBf16>(residual, i, lanes), loadLanes<kBf16>(x, i, lanes));
      storeLanes<kBf16>(residual, i, lanes, sum);
      return asStored<kBf16>(sum);
    };
    __m512d even = _mm512_setzero_pd(), odd = _mm512_setzero_pd();
    for (int64_t i = 0; i < args.hidden; i += 32) {
      const __m512 u = addChunk(i);
      even = addSquares(u, even);
      if (i + 16 < args.hidden) {
        const __m512 v = addChunk(i + 16);
        odd = addSquares(v, odd);
      }
    }
    const float inverse = inverseRms(_mm512_add_pd(even, odd), args.hidden, args.eps);
    scaleRow<kBf16>(residual, inverse, args.weight, static_cast<uint8_t *>(args.out) + r * rowBytes,
                    args.hidden);
  }
}

} // namespace

void rmsNormRowsAvx512(const RmsNormArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return rmsNormRows<true>(args, row0, row1);
  rmsNormRows<false>(args, row0, row1);
}

void addRmsNormRowsAvx512(const AddRmsNormArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return addRmsNormRows<true>(args, row0, row1);
  addRmsNormRows<false>(args, row0, row1);
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
