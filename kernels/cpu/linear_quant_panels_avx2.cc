// Quantized Linear on 16-output panels for AVX2 + FMA + F16C, which linear_quant.cc runs at
// CpuIsa::kAvx2 where the CPU has F16C (cpuHasF16c, cpu_isa.h), on the same packed panels as the
// AVX-512 levels (linear_quant.h "Panels"). Built like linear_panels_avx2.cc: only this file's own
// functions target AVX2 (KILN_TARGET_BEGIN of isa_target.h after the includes, everything in an
// anonymous namespace but the entry points).
//
// linear_quant_panels_avx512.cc's method and per-output order (its top comment), a panel's 16
// outputs held as two 8-lane registers: per group, each (row, output) sums x * u in one chain of
// fused multiply-adds from zero in the panel's column order (Q8 / Q8F / Q8F32 column by column;
// 4-bit formats byte b's low nibble, then its high one), u the stored value (Q8 q; Q8F, Q8F32 the
// fp8 value / 256; Q4 u - 8; Q4M and Q4Z u), then acc = part * scale or fma(part, scale, acc), and
// for Q4M / Q4Z fma(the row's sum of x over the group, the min, acc). Only the decoding and the
// blocking are this file's own: values are widened by integer instructions and converted (the
// AVX-512 copy looks nibbles up in a table: the same floats), and micro-kernels hold 8 to 12
// accumulators (up to 6 rows; a decode row takes 4 panels at once). Every output lane is computed
// alone in that order, whatever micro-kernel shape or tile it falls in: a row's result is
// bit-identical alone or anywhere in a batch. Before, this level dequantized each weight row into
// scratch and summed dot products across lanes (linear_quant_avx2.cc, still the path for weights
// nobody packed).
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant.h"

#include <cstdint>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX2_F16C)

namespace kiln::kernels::cpu::linear_quant {
namespace {

// How far ahead of its position in a panel a micro-kernel fetches.
constexpr int64_t kPrefetchBytes = 2048;

#include "kernels/cpu/count_dispatch.inc"
#include "kernels/cpu/panel_scales_avx2.inc"

inline __m128i load16Bytes(const uint8_t *p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
}

// A panel's 16 outputs: lanes 0-7 and 8-15.
struct Lanes16 {
  __m256 lo, hi;
};

// The parts of one group: R rows x P panels, each 16 outputs' sums of x * u.
template <int R, int P> struct Parts {
  Lanes16 v[R][P];
  void clear() {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        v[r][p] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  }
  // Adds x[r] * w for every row of panel p; x rows xStride apart.
  void add(const float *x, int64_t xStride, int p, Lanes16 w) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * xStride);
      v[r][p].lo = _mm256_fmadd_ps(xv, w.lo, v[r][p].lo);
      v[r][p].hi = _mm256_fmadd_ps(xv, w.hi, v[r][p].hi);
    }
  }
};

// 16 bytes as 32-bit lanes: bytes 0-7 and 8-15, sign- or zero-extended.
template <bool kSigned> inline void widenBytes(__m128i bytes, __m256i &lo, __m256i &hi) {
  const __m128i upper = _mm_unpackhi_epi64(bytes, bytes);
  lo = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  hi = kSigned ? _mm256_cvtepi8_epi32(upper) : _mm256_cvtepu8_epi32(upper);
}

// 16 fp8 E4M3 values / 256, as linear_quant_panels_avx512.cc's fp8Over256: the bits moved into
// fp16 position (the fp16 value is 2^-8 times the fp8 one), then widened by F16C. No NaN: kiln's
// quantizer writes none.
inline Lanes16 fp8Over256(__m128i bytes) {
  const __m256i words = _mm256_cvtepu8_epi16(bytes);
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(words, _mm256_set1_epi16(0x80)), 8);
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(words, _mm256_set1_epi16(0x7F)), 7);
  const __m256i halves = _mm256_or_si256(sign, magnitude);
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(halves)),
          _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1))};
}

// Q8, Q8F and Q8F32: one byte a value, column by column.
template <int R, int P, QuantFormat F>
inline void addByteGroup(const PanelTile &t, const uint8_t *block, const float *x,
                         Parts<R, P> &parts) {
  for (int32_t k = 0; k < t.groupSize; ++k)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const uint8_t *bytes = block + p * t.layout.panelBytes + k * kPanelOutputs;
      if (k % 4 == 0)
        _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
      Lanes16 w;
      if constexpr (isFp8Quant(F)) {
        w = fp8Over256(load16Bytes(bytes));
      } else {
        __m256i lo, hi;
        widenBytes<true>(load16Bytes(bytes), lo, hi);
        w = {_mm256_cvtepi32_ps(lo), _mm256_cvtepi32_ps(hi)};
      }
      parts.add(x + k, t.xStride, p, w);
    }
}

// 4-bit formats: per run of 32 columns, byte b's low nibble (column b), then its high one (column
// b + 16). Q4 takes u - 8, the others u (the same floats as the AVX-512 copy's table).
template <int R, int P, QuantFormat F>
inline void addNibbleGroup(const PanelTile &t, const uint8_t *block, const float *x,
                           Parts<R, P> &parts) {
  const __m256i mask = _mm256_set1_epi32(0x0F);
  const __m256i offset = _mm256_set1_epi32(F == QuantFormat::kQ4 ? 8 : 0);
  for (int32_t run = 0; run < t.groupSize / kQuantSubBlock; ++run)
    for (int32_t b = 0; b < 16; ++b) {
      const float *xRun = x + run * kQuantSubBlock + b;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const uint8_t *bytes = block + p * t.layout.panelBytes + run * 256 + b * kPanelOutputs;
        if (b % 4 == 0)
          _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
        __m256i lo, hi;
        widenBytes<false>(load16Bytes(bytes), lo, hi);
        auto values = [&](__m256i u) { return _mm256_cvtepi32_ps(_mm256_sub_epi32(u, offset)); };
        parts.add(xRun, t.xStride, p,
                  {values(_mm256_and_si256(lo, mask)), values(_mm256_and_si256(hi, mask))});
        parts.add(xRun + 16, t.xStride, p,
                  {values(_mm256_srli_epi32(lo, 4)), values(_mm256_srli_epi32(hi, 4))});
      }
    }
}

// Rows [r0, r0 + R) x panels [p0, p0 + P) of the tile into its sums.
template <int R, int P, QuantFormat F> void panelMicro(const PanelTile &t, int32_t r0, int32_t p0) {
  const PanelLayout &layout = t.layout;
  const uint8_t *panels = t.panels + p0 * layout.panelBytes;
  const float *x = t.x + r0 * t.xStride;
  for (int32_t g = 0; g < layout.groups; ++g) {
    const uint8_t *block = panels + g * layout.groupBytes;
    const float *xg = x + int64_t(g) * t.groupSize;
    Parts<R, P> parts;
    parts.clear();
    if constexpr (isByteQuant(F))
      addByteGroup<R, P, F>(t, block, xg, parts);
    else
      addNibbleGroup<R, P, F>(t, block, xg, parts);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      __m256 scale[2], min[2];
      panelGroupScales<F>(block + p * layout.panelBytes + layout.valueBytes, scale, min);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        float *acc = t.sums + (r0 + r) * kPanelSumStride + (p0 + p) * kPanelOutputs;
        const __m256 part[2] = {parts.v[r][p].lo, parts.v[r][p].hi};
        for (int h = 0; h < 2; ++h) {
          __m256 sum = g == 0 ? _mm256_mul_ps(part[h], scale[h])
                              : _mm256_fmadd_ps(part[h], scale[h], _mm256_loadu_ps(acc + 8 * h));
          if constexpr (hasQuantMins(F))
            sum =
                _mm256_fmadd_ps(_mm256_set1_ps(t.xSums[(r0 + r) * layout.groups + g]), min[h], sum);
          _mm256_storeu_ps(acc + 8 * h, sum);
        }
      }
    }
  }
}

// Micro-kernels of up to 6 rows, 8 to 12 accumulators: fewer rows take more panels at once (a
// decode row: 4 panels, so eight chains of fused multiply-adds are in flight).
template <QuantFormat F> void panelTile(const PanelTile &t) {
  forRowGroups<6>(t.rows, [&](auto n, int32_t r) {
    constexpr int kPanels = n() == 1 ? 4 : n() <= 3 ? 2 : 1;
    forChunks<kPanels>(t.panelCount,
                       [&](auto panels, int32_t p0) { panelMicro<n(), panels(), F>(t, r, p0); });
  });
}

} // namespace

void panelTileAvx2(const PanelTile &tile) {
  switch (tile.format) {
  case QuantFormat::kQ8:
    return panelTile<QuantFormat::kQ8>(tile);
  case QuantFormat::kQ4:
    return panelTile<QuantFormat::kQ4>(tile);
  case QuantFormat::kQ4Min:
    return panelTile<QuantFormat::kQ4Min>(tile);
  case QuantFormat::kQ4Zero:
    return panelTile<QuantFormat::kQ4Zero>(tile);
  case QuantFormat::kQ8Float:
    return panelTile<QuantFormat::kQ8Float>(tile);
  case QuantFormat::kQ8FloatF32:
    return panelTile<QuantFormat::kQ8FloatF32>(tile);
  }
}

// groupSumsAvx512's order on two 8-lane halves: lane l (of 16) adds the group's columns l, l + 16,
// ... in order; then the lanes in the same tree (l + 8 first, then halves, quarters, ...).
void groupSumsAvx2(const float *x, int32_t groupSize, int32_t groups, float *sums) {
  for (int32_t g = 0; g < groups; ++g, x += groupSize) {
    __m256 lo = _mm256_loadu_ps(x), hi = _mm256_loadu_ps(x + 8);
    for (int32_t k = 16; k < groupSize; k += 16) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + k));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + k + 8));
    }
    const __m256 eight = _mm256_add_ps(lo, hi);
    const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    sums[g] = _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
  }
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
