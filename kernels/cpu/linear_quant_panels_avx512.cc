// Quantized Linear on 16-output panels for AVX-512 (F, BW, VL, DQ), which linear_quant.cc runs from
// CpuIsa::kAvx512 up on weights packed when the op is prepared (linear_quant.h "Panels"). Built
// like linear_avx512.cc: only this file's own functions target AVX-512 (KILN_TARGET_BEGIN of
// isa_target.h after the includes, everything in an anonymous namespace but the entry points).
//
// The 16 lanes of a vector are a panel's 16 outputs, so no dot product ends in a sum across lanes
// and one decoded weight vector serves every row of the micro-kernel (up to 8), each row's x value
// broadcast. Per group of groupSize columns, each (row, output) sums x * u in one chain of fused
// multiply-adds starting from zero, u the stored value (Q8 q; Q8F, Q8F32 the fp8 value / 256, the
// 256 going into the scale; Q4 u - 8; Q4M u, looked up by one permute from a table of the 16 nibble
// values; Q4Z as Q4M), in the order the panel stores them: Q8 column by column; Q4 / Q4M per run of
// 32 columns, byte b's low nibble (column b) then its high one (column b + 16), b = 0..15. Then acc
// = that part * the group's scale (the first group) or fma(part, scale, acc); Q4M adds fma(the
// row's sum of x over the group, the min, acc) and Q4Z the same with -zero * scale (exact) for the
// min, that sum taken in a fixed order (groupSumsAvx512). The accumulators live in the tile's sums
// (one load and store per group), so a micro-kernel holds only its parts in registers. Every output
// lane is computed alone in that order, whatever micro-kernel shape or tile it falls in: a row's
// result is bit-identical alone or anywhere in a batch.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant.h"

#include <cstdint>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu::linear_quant {
namespace {

// How far ahead of its position in a panel a micro-kernel fetches.
constexpr int64_t kPrefetchBytes = 2048;

inline __m128i load16Bytes(const uint8_t *p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
}

#include "kernels/cpu/count_dispatch.inc"

// The parts of one group: R rows x P panels, each 16 outputs' sums of x * u.
template <int R, int P> struct Parts {
  __m512 v[R][P];
  Parts() {
    for (int r = 0; r < R; ++r)
      for (int p = 0; p < P; ++p)
        v[r][p] = _mm512_setzero_ps();
  }
  // Adds x[r] * w[p] for every row and panel; x rows xStride apart.
  void add(const float *x, int64_t xStride, const __m512 (&w)[P]) {
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * xStride]);
      for (int p = 0; p < P; ++p)
        v[r][p] = _mm512_fmadd_ps(xv, w[p], v[r][p]);
    }
  }
};

// 16 fp8 E4M3 values / 256 (the bits moved into fp16 position: the fp16 value 2^-8 times the fp8
// one; the 256 goes into the group's scale). No NaN: kiln's quantizer writes none.
inline __m512 fp8Over256(__m128i bytes) {
  const __m512i lanes = _mm512_cvtepu8_epi32(bytes);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(lanes, _mm512_set1_epi32(0x80)), 8);
  const __m512i magnitude = _mm512_slli_epi32(_mm512_and_si512(lanes, _mm512_set1_epi32(0x7F)), 7);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_or_si512(sign, magnitude)));
}

// Q8, Q8F and Q8F32: one byte a value, column by column.
template <int R, int P, QuantFormat F>
inline void addByteGroup(const PanelTile &t, const uint8_t *block, const float *x,
                         Parts<R, P> &parts) {
  for (int32_t k = 0; k < t.groupSize; ++k) {
    __m512 w[P];
    for (int p = 0; p < P; ++p) {
      const uint8_t *bytes = block + p * t.layout.panelBytes + k * kPanelOutputs;
      if (k % 4 == 0)
        _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
      if constexpr (isFp8Quant(F))
        w[p] = fp8Over256(load16Bytes(bytes));
      else
        w[p] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16Bytes(bytes)));
    }
    parts.add(x + k, t.xStride, w);
  }
}

template <int R, int P>
inline void addQ4Group(const PanelTile &t, const uint8_t *block, const float *x, __m512 table,
                       Parts<R, P> &parts) {
  for (int32_t run = 0; run < t.groupSize / kQuantSubBlock; ++run)
    for (int32_t b = 0; b < 16; ++b) {
      __m512 low[P], high[P];
      for (int p = 0; p < P; ++p) {
        const uint8_t *bytes = block + p * t.layout.panelBytes + run * 256 + b * kPanelOutputs;
        if (b % 4 == 0)
          _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
        const __m512i lanes = _mm512_cvtepu8_epi32(load16Bytes(bytes));
        low[p] = _mm512_permutexvar_ps(lanes, table); // reads only the low 4 bits of a lane
        high[p] = _mm512_permutexvar_ps(_mm512_srli_epi32(lanes, 4), table);
      }
      const float *xRun = x + run * kQuantSubBlock + b;
      parts.add(xRun, t.xStride, low);
      parts.add(xRun + 16, t.xStride, high);
    }
}

// Rows [r0, r0 + R) x panels [p0, p0 + P) of the tile into its sums.
template <int R, int P, QuantFormat F> void panelMicro(const PanelTile &t, int32_t r0, int32_t p0) {
  const PanelLayout &layout = t.layout;
  const __m512 table = F == QuantFormat::kQ4
                           ? _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)
                           : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const uint8_t *panels = t.panels + p0 * layout.panelBytes;
  const float *x = t.x + r0 * t.xStride;
  for (int32_t g = 0; g < layout.groups; ++g) {
    const uint8_t *block = panels + g * layout.groupBytes;
    const float *xg = x + int64_t(g) * t.groupSize;
    Parts<R, P> parts;
    if constexpr (isByteQuant(F))
      addByteGroup<R, P, F>(t, block, xg, parts);
    else
      addQ4Group(t, block, xg, table, parts);
    for (int p = 0; p < P; ++p) {
      const uint8_t *tail = block + p * layout.panelBytes + layout.valueBytes;
      __m512 scale =
          F == QuantFormat::kQ8FloatF32
              ? _mm512_loadu_ps(tail)
              : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(tail)));
      if constexpr (isFp8Quant(F))
        scale = _mm512_mul_ps(scale, _mm512_set1_ps(256.0f)); // exact: fp8Over256's factor
      // The weight of u = 0: Q4M the min, Q4Z -zero * scale (exact).
      __m512 min = _mm512_setzero_ps();
      const __m256i mins = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(tail + 32));
      if constexpr (F == QuantFormat::kQ4Min)
        min = _mm512_cvtph_ps(mins);
      if constexpr (F == QuantFormat::kQ4Zero)
        min = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(mins)),
                            _mm512_sub_ps(_mm512_setzero_ps(), scale));
      for (int r = 0; r < R; ++r) {
        float *acc = t.sums + (r0 + r) * kPanelSumStride + (p0 + p) * kPanelOutputs;
        __m512 sum = g == 0 ? _mm512_mul_ps(parts.v[r][p], scale)
                            : _mm512_fmadd_ps(parts.v[r][p], scale, _mm512_loadu_ps(acc));
        if constexpr (hasQuantMins(F))
          sum = _mm512_fmadd_ps(_mm512_set1_ps(t.xSums[(r0 + r) * layout.groups + g]), min, sum);
        _mm512_storeu_ps(acc, sum);
      }
    }
  }
}

// Micro-kernels of up to 8 rows; fewer rows take more panels at once (a decode row: 8 panels, so
// eight chains of fused multiply-adds are in flight).
template <QuantFormat F> void panelTile(const PanelTile &t) {
  forRowGroups<8>(t.rows, [&](auto n, int32_t r) {
    constexpr int kPanels = n() <= 2 ? 8 : n() <= 4 ? 4 : 2;
    forChunks<kPanels>(t.panelCount,
                       [&](auto panels, int32_t p0) { panelMicro<n(), panels(), F>(t, r, p0); });
  });
}

// The 16 lanes as a fixed tree: halves, then quarters, ...
inline float laneSum(__m512 v) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

} // namespace

void panelTileAvx512(const PanelTile &tile) {
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

// Lane l adds the group's columns l, l + 16, ... in order; then the lanes in laneSum's tree.
void groupSumsAvx512(const float *x, int32_t groupSize, int32_t groups, float *sums) {
  for (int32_t g = 0; g < groups; ++g, x += groupSize) {
    __m512 v = _mm512_loadu_ps(x);
    for (int32_t k = 16; k < groupSize; k += 16)
      v = _mm512_add_ps(v, _mm512_loadu_ps(x + k));
    sums[g] = laneSum(v);
  }
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
