// Quantized Linear dot products for AVX2 + FMA, which linear_quant.cc runs at CpuIsa::kAvx2. Built
// like linear_avx2.cc: only this file's own functions target AVX2 (KILN_TARGET_BEGIN after the
// includes, everything in an anonymous namespace but the entry point).
//
// Per output of the tile: its weight row dequantized (Q8 scale * q, Q4 scale * u - 8 * scale, Q4M
// scale * u + min, each one fused multiply-add or multiply: the exact weights), in registers for
// a tile of up to 4 rows, else into scratch once; every row of the tile, four at a time,
// multiplies it: two 8-lane accumulators per row, so lane l
// of the pair sums the products at k = l (mod 16) in increasing k with fused multiply-adds, and the
// lanes are added l + 8 first, then halves (laneSum). The AVX-512 levels run this code on weights
// nobody packed into panels (linear_quant.cc).
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant.h"
#include "runtime/base/half.h"

#include <cstdint>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu::linear_quant {
namespace {

// Eight bytes from p widened to eight int32 lanes, then to floats.
inline __m256 bytesToFloats(__m128i bytes, bool isSigned) {
  const __m256i lanes = isSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  return _mm256_cvtepi32_ps(lanes);
}

// The 32 values of one 16-byte run (value b low nibble of byte b, value b + 16 the high one) as
// scale * u + offset.
inline void dequantizeNibbleRun(const uint8_t *run, __m256 scale, __m256 offset, float *dst) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(run));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i low = _mm_and_si128(bytes, mask);
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i parts[4] = {low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)};
  for (int i = 0; i < 4; ++i)
    _mm256_storeu_ps(dst + 8 * i, _mm256_fmadd_ps(scale, bytesToFloats(parts[i], false), offset));
}

void dequantizeRowAvx2(const QuantMatrix &w, int64_t row, float *dst) {
  const uint8_t *values = w.values + row * w.rowBytes;
  for (int32_t g = 0; g < w.groupsPerRow; ++g) {
    const float s = quantScale(w, row * w.groupsPerRow + g);
    const __m256 scale = _mm256_set1_ps(s);
    if (w.format == QuantFormat::kQ8) {
      for (int32_t k = 0; k < w.groupSize; k += 8, values += 8, dst += 8)
        _mm256_storeu_ps(
            dst, _mm256_mul_ps(
                     scale, bytesToFloats(
                                _mm_loadl_epi64(reinterpret_cast<const __m128i *>(values)), true)));
      continue;
    }
    // Q4 scale * u - 8 * scale is scale * (u - 8) exactly (both are exact in fp32), Q4Z likewise.
    const __m256 offset = _mm256_set1_ps(groupOffset(w, row * w.groupsPerRow + g, s));
    for (int32_t k = 0; k < w.groupSize; k += kQuantSubBlock, values += 16, dst += kQuantSubBlock)
      dequantizeNibbleRun(values, scale, offset, dst);
  }
}

// The lanes of acc0 (k = 0..7 mod 16) and acc1 (8..15) added in a fixed tree: l + 8, then the
// 128-bit halves, then pairs.
inline float laneSum(__m256 acc0, __m256 acc1) {
  const __m256 eight = _mm256_add_ps(acc0, acc1);
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// sums[(r0 + r) * kOutTile + o] for R rows from r0 against the dequantized weight row `wrow`.
template <int R>
void dotRows(const float *wrow, int32_t cols, const DotTile &tile, int32_t r0, int32_t o,
             float *sums) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r)
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float *x = tile.x + r0 * tile.xStride;
  for (int32_t k = 0; k < cols; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(wrow + k), w1 = _mm256_loadu_ps(wrow + k + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * tile.xStride + k), w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * tile.xStride + k + 8), w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r)
    sums[(r0 + r) * kOutTile + o] = laneSum(acc[r][0], acc[r][1]);
}

// R <= 4 rows from r0 against weight row `out` read from its packed bytes: each 8 weights made
// in registers as dequantizeRowAvx2 makes them and multiplied into the rows' accumulators (values
// 0-7 and 16-23 of a 32-run into the first, 8-15 and 24-31 into the second), so the same sums as
// dotRows over the dequantized row.
template <int R>
void dotRowsPacked(const QuantMatrix &w, int32_t out, const DotTile &tile, int32_t r0, int32_t o,
                   float *sums) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r)
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float *x = tile.x + r0 * tile.xStride;
  const auto multiply = [&](__m256 weights8, int32_t k, int half) {
    for (int r = 0; r < R; ++r)
      acc[r][half] =
          _mm256_fmadd_ps(_mm256_loadu_ps(x + r * tile.xStride + k), weights8, acc[r][half]);
  };
  const uint8_t *values = w.values + int64_t(out) * w.rowBytes;
  const __m128i mask = _mm_set1_epi8(0x0F);
  int32_t k = 0;
  for (int32_t g = 0; g < w.groupsPerRow; ++g) {
    const float s = quantScale(w, int64_t(out) * w.groupsPerRow + g);
    const __m256 scale = _mm256_set1_ps(s);
    if (w.format == QuantFormat::kQ8) {
      for (int32_t i = 0; i < w.groupSize; i += 16, values += 16, k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(values));
        multiply(_mm256_mul_ps(scale, bytesToFloats(bytes, true)), k, 0);
        multiply(_mm256_mul_ps(scale, bytesToFloats(_mm_srli_si128(bytes, 8), true)), k + 8, 1);
      }
      continue;
    }
    const __m256 offset = _mm256_set1_ps(groupOffset(w, int64_t(out) * w.groupsPerRow + g, s));
    for (int32_t i = 0; i < w.groupSize; i += kQuantSubBlock, values += 16, k += kQuantSubBlock) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i *>(values));
      const __m128i low = _mm_and_si128(bytes, mask);
      const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
      const __m128i parts[4] = {low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)};
      for (int p = 0; p < 4; ++p)
        multiply(_mm256_fmadd_ps(scale, bytesToFloats(parts[p], false), offset), k + 8 * p, p % 2);
    }
  }
  for (int r = 0; r < R; ++r)
    sums[(r0 + r) * kOutTile + o] = laneSum(acc[r][0], acc[r][1]);
}

} // namespace

void dotTileAvx2(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights) {
  // Q8F, Q8F32: every row count from the dequantized row (the fp8 values through a table).
  if (tile.rows <= 4 && !isFp8Quant(w.format)) {
    for (int32_t o = 0; o < tile.outs; ++o)
      switch (tile.rows) {
      case 4:
        dotRowsPacked<4>(w, tile.out0 + o, tile, 0, o, sums);
        break;
      case 3:
        dotRowsPacked<3>(w, tile.out0 + o, tile, 0, o, sums);
        break;
      case 2:
        dotRowsPacked<2>(w, tile.out0 + o, tile, 0, o, sums);
        break;
      default:
        dotRowsPacked<1>(w, tile.out0 + o, tile, 0, o, sums);
      }
    return;
  }
  for (int32_t o = 0; o < tile.outs; ++o) {
    if (isFp8Quant(w.format))
      dequantizeRow(w, tile.out0 + o, weights);
    else
      dequantizeRowAvx2(w, tile.out0 + o, weights);
    int32_t r = 0;
    for (; r + 4 <= tile.rows; r += 4)
      dotRows<4>(weights, w.cols, tile, r, o, sums);
    switch (tile.rows - r) {
    case 3:
      dotRows<3>(weights, w.cols, tile, r, o, sums);
      break;
    case 2:
      dotRows<2>(weights, w.cols, tile, r, o, sums);
      break;
    case 1:
      dotRows<1>(weights, w.cols, tile, r, o, sums);
      break;
    default:
      break;
    }
  }
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
