// rmsNorm / addRmsNorm rows on 8 lanes (AVX2 + FMA), for norm_rows.h: norm_rows_avx512.cc's
// operations at half the width (squares summed in double, even and odd chunks of the row on two
// sets of lanes, then weight * (x * inverse)), a bf16 row widened in registers and each output
// rounded there (bf16_lanes_avx2.inc), with no fp32 copy of the row. A row's last partial chunk of
// 8 runs through the same lanes, zeros past the row. Built as linear_avx2.cc is: only this file's
// functions target AVX2.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/norm_rows.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/bf16_lanes_avx2.inc"

// v as a row of the type holds it: rounded to bf16 and widened back, or itself.
template <bool kBf16> __m256 asStored(__m256 v) {
  if constexpr (kBf16)
    return widen8(round8(v));
  else
    return v;
}

// Squares summed in double: lanes i and i + 4 of 8 fp32 lanes on double lane i.
struct SquareSums {
  __m256d even, odd;
};
SquareSums noSquares() {
  return {_mm256_setzero_pd(), _mm256_setzero_pd()};
}
__m256d addSquares(__m256 v, __m256d sums) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  return _mm256_fmadd_pd(hi, hi, _mm256_fmadd_pd(lo, lo, sums));
}

// 1 / sqrt(mean of the squares + eps), as norm.cc's rmsNormRow.
float inverseRms(const SquareSums &sums, int32_t hidden, float eps) {
  const __m256d total = _mm256_add_pd(sums.even, sums.odd);
  const __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(total), _mm256_extractf128_pd(total, 1));
  const double sum = _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
  const float variance = static_cast<float>(sum) / static_cast<float>(hidden);
  return 1.0f / std::sqrt(variance + eps);
}

// out = weight * (x * inverse), each element rounded once when stored.
template <bool kBf16>
void scaleRow(const void *x, float inverse, const float *weight, void *out, int32_t hidden) {
  const __m256 factor = _mm256_set1_ps(inverse);
  for (int64_t i = 0; i < hidden; i += 8) {
    const __m256 v = _mm256_mul_ps(loadLanes8<kBf16>(x, i, hidden), factor);
    storeLanes8<kBf16>(out, i, hidden, _mm256_mul_ps(loadLanes8<false>(weight, i, hidden), v));
  }
}

template <bool kBf16> void rmsNormRows(const RmsNormArgs &args, int64_t row0, int64_t row1) {
  const int64_t bytes = kBf16 ? 2 : 4, rowBytes = int64_t(args.hidden) * bytes;
  for (int64_t r = row0; r < row1; ++r) {
    const void *x = static_cast<const uint8_t *>(args.x) + r * rowBytes;
    SquareSums sums = noSquares();
    for (int64_t i = 0; i < args.hidden; i += 16) {
      sums.even = addSquares(loadLanes8<kBf16>(x, i, args.hidden), sums.even);
      if (i + 8 < args.hidden)
        sums.odd = addSquares(loadLanes8<kBf16>(x, i + 8, args.hidden), sums.odd);
    }
    scaleRow<kBf16>(x, inverseRms(sums, args.hidden, args.eps), args.weight,
                    static_cast<uint8_t *>(args.out) + r * rowBytes, args.hidden);
  }
}

// residual += x, stored (rounded once); its squares summed as stored; then the norm of the row
// as stored.
template <bool kBf16> void addRmsNormRows(const AddRmsNormArgs &args, int64_t row0, int64_t row1) {
  const int64_t bytes = kBf16 ? 2 : 4, rowBytes = int64_t(args.hidden) * bytes;
  for (int64_t r = row0; r < row1; ++r) {
    const void *x = static_cast<const uint8_t *>(args.x) + r * rowBytes;
    void *residual = static_cast<uint8_t *>(args.residual) + r * rowBytes;
    // residual + x for elements [i, i + 8), stored; returns the sum as stored.
    auto addChunk = [&](int64_t i) {
      const __m256 sum = _mm256_add_ps(loadLanes8<kBf16>(residual, i, args.hidden),
                                       loadLanes8<kBf16>(x, i, args.hidden));
      storeLanes8<kBf16>(residual, i, args.hidden, sum);
      return asStored<kBf16>(sum);
    };
    SquareSums sums = noSquares();
    for (int64_t i = 0; i < args.hidden; i += 16) {
      sums.even = addSquares(addChunk(i), sums.even);
      if (i + 8 < args.hidden)
        sums.odd = addSquares(addChunk(i + 8), sums.odd);
    }
    scaleRow<kBf16>(residual, inverseRms(sums, args.hidden, args.eps), args.weight,
                    static_cast<uint8_t *>(args.out) + r * rowBytes, args.hidden);
  }
}

} // namespace

void rmsNormRowsAvx2(const RmsNormArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return rmsNormRows<true>(args, row0, row1);
  rmsNormRows<false>(args, row0, row1);
}

void addRmsNormRowsAvx2(const AddRmsNormArgs &args, int64_t row0, int64_t row1) {
  if (args.type == ElemType::kBF16)
    return addRmsNormRows<true>(args, row0, row1);
  addRmsNormRows<false>(args, row0, row1);
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
