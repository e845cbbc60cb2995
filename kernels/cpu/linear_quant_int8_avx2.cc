// linear_quant_int8.h on AVX2 + FMA + F16C: its rule for quantizing rows on 8 lanes, and its
// products on the quantized panels (linear_quant.h "Panels"), which linear_quant.cc runs from avx2
// up where the CPU has F16C. A panel's 16 outputs are two registers of 8 int32 lanes; two columns
// at a time, the two bytes of an output are interleaved: Q8 widens them to int16 (one
// _mm256_madd_epi16 multiplies 8 outputs by two columns of x, a row's two int16 q values broadcast
// as one 32-bit lane, and adds the pair); the 4-bit formats keep their unsigned nibbles as bytes
// (one _mm256_maddubs_epi16 takes 16 outputs by two columns against the row's int8 q, and sums
// stay in int16 for 16 columns: addNibbleBlock). Integer sums are exact, so the order of
// columns within a block is free; per block and group the floats are combined exactly as the rule
// says, and every output lane is computed alone: a row's bits do not depend on its tile.
// Built like linear_quant_panels_avx2.cc (KILN_TARGET_BEGIN after the includes).
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant_int8.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX2_F16C)

namespace kiln::kernels::cpu::linear_quant {
namespace {

#include "kernels/cpu/count_dispatch.inc"
#include "kernels/cpu/panel_scales_avx2.inc"

constexpr int64_t kPrefetchBytes = 2048;

inline __m128i load16Bytes(const uint8_t *p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
}

// Two int16 of a row (columns k, k + 1) in every 32-bit lane.
inline __m256i pairOf(const int16_t *q) {
  int32_t pair;
  std::memcpy(&pair, q, 4);
  return _mm256_set1_epi32(pair);
}

inline int32_t sumLanes(__m256i v) {
  const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
  return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 1)));
}

inline float maxLanes(__m256 v) {
  const __m128 four = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_max_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_max_ss(two, _mm_movehdup_ps(two)));
}

// One block of 32 columns, by the rule of linear_quant_int8.h.
void quantizeBlock(const float *in, int16_t *q, int8_t *bytes, float &scale, int32_t &sum) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 huge = _mm256_set1_ps(3.4028234663852886e38f);
  __m256 v[4], amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(in + 8 * i);
    const __m256 a = _mm256_and_ps(v[i], magnitude);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, huge, _CMP_NLE_UQ)); // NaN or infinite
    amax = _mm256_max_ps(amax, a);
  }
  const float top = maxLanes(amax);
  if (_mm256_movemask_ps(bad) != 0 || top == 0.0f) {
    std::memset(q, 0, kInt8Block * sizeof(int16_t));
    std::memset(bytes, 0, kInt8Block);
    scale = _mm256_movemask_ps(bad) != 0 ? __builtin_nanf("") : 0.0f;
    sum = 0;
    return;
  }
  const __m256 inverse = _mm256_set1_ps(127.0f / top);
  __m256i ints[4], total = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    ints[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse)); // nearest, ties to even
    total = _mm256_add_epi32(total, ints[i]);
  }
  // packs interleaves 128-bit halves; the permutes restore the order.
  __m256i halves[2];
  for (int i = 0; i < 2; ++i) {
    halves[i] = _mm256_permute4x64_epi64(_mm256_packs_epi32(ints[2 * i], ints[2 * i + 1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 16 * i), halves[i]);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(bytes),
                      _mm256_permute4x64_epi64(_mm256_packs_epi16(halves[0], halves[1]), 0xD8));
  scale = top / 127.0f;
  sum = sumLanes(total);
}

// A panel's 16 outputs: lanes 0-7 and 8-15.
struct IntLanes16 {
  __m256i lo, hi;
};

// Two columns of 16 outputs, as int16 pairs [output][column, column + 1]: from the panel's rows
// of signed bytes `a` (column k) and `b` (column k + 1).
inline IntLanes16 interleave(__m128i a, __m128i b) {
  return {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b)),
          _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a, b))};
}

// The integer sums of one block: R rows x P panels.
template <int R, int P> struct BlockSums {
  IntLanes16 v[R][P];
  void clear() {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        v[r][p] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  }
  // Adds every row's two q values at column k (`q` rows `cols` apart) times the pairs of panel p.
  void add(const int16_t *q, int32_t cols, int p, IntLanes16 w) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i x = pairOf(q + int64_t(r) * cols);
      v[r][p].lo = _mm256_add_epi32(v[r][p].lo, _mm256_madd_epi16(w.lo, x));
      v[r][p].hi = _mm256_add_epi32(v[r][p].hi, _mm256_madd_epi16(w.hi, x));
      // Integer adds reassociate: without this GCC sums a whole block's products as a tree,
      // every product live at once, and spills them.
      asm("" : "+x"(v[r][p].lo), "+x"(v[r][p].hi));
    }
  }
};

// Q8: block b of the group is columns 32b.. of [column][output] bytes.
template <int R, int P>
inline void addByteBlock(const Int8PanelTile &t, const uint8_t *group, int32_t b, const int16_t *q,
                         BlockSums<R, P> &sums) {
#pragma GCC unroll 16
  for (int32_t k = 0; k < kInt8Block; k += 2)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const uint8_t *bytes = group + p * t.layout.panelBytes + (b * kInt8Block + k) * kPanelOutputs;
      if (k % 4 == 0)
        _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
      sums.add(q + k, t.x.cols, p,
               interleave(load16Bytes(bytes), load16Bytes(bytes + kPanelOutputs)));
    }
}

// Two int8 of a row (columns k, k + 1) in every 16-bit lane.
inline __m256i bytePairOf(const int8_t *q) {
  int16_t pair;
  std::memcpy(&pair, q, 2);
  return _mm256_set1_epi16(pair);
}

// 4-bit: block b of the group is its run b, byte row j holding column j (low nibble) and j + 16
// (high). Two byte rows interleaved give each output's columns (j, j + 1) as unsigned bytes, which
// _mm256_maddubs_epi16 multiplies by the row's int8 q and adds in pairs: 16 outputs' int16 sums.
// Eight of them are added in int16 (|sum| <= 8 * 2 * 15 * 127 = 30480) before widening. Q4 takes
// sum(q * u) - 8 * sum(q); qSums: each row's sum of q over the block, rowBlocks apart.
template <int R, int P, QuantFormat F>
inline void addNibbleBlock(const Int8PanelTile &t, const uint8_t *group, int32_t b, const int8_t *q,
                           const int32_t *qSums, int32_t rowBlocks, BlockSums<R, P> &sums) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int32_t half = 0; half < 16; half += 8) {
    __m256i acc[R][P];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        acc[r][p] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int32_t j = half; j < half + 8; j += 2)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const uint8_t *bytes = group + p * t.layout.panelBytes + b * 256 + j * kPanelOutputs;
        if (j % 4 == 0)
          _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
        const __m128i a = load16Bytes(bytes), c = load16Bytes(bytes + kPanelOutputs);
        const __m256i u = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(a, c)),
                                                  _mm_unpackhi_epi8(a, c), 1);
        const __m256i low = _mm256_and_si256(u, mask);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(u, 4), mask);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int8_t *row = q + int64_t(r) * t.x.cols;
          acc[r][p] = _mm256_add_epi16(acc[r][p], _mm256_maddubs_epi16(low, bytePairOf(row + j)));
          acc[r][p] =
              _mm256_add_epi16(acc[r][p], _mm256_maddubs_epi16(high, bytePairOf(row + 16 + j)));
          asm("" : "+x"(acc[r][p])); // as in BlockSums::add
        }
      }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        sums.v[r][p].lo = _mm256_add_epi32(
            sums.v[r][p].lo, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc[r][p])));
        sums.v[r][p].hi = _mm256_add_epi32(
            sums.v[r][p].hi, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc[r][p], 1)));
      }
  }
  if constexpr (F == QuantFormat::kQ4)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i offset = _mm256_set1_epi32(8 * qSums[r * rowBlocks]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        sums.v[r][p].lo = _mm256_sub_epi32(sums.v[r][p].lo, offset);
        sums.v[r][p].hi = _mm256_sub_epi32(sums.v[r][p].hi, offset);
      }
    }
}

// Rows [r0, r0 + R) x panels [p0, p0 + P) of the tile into its sums.
template <int R, int P, QuantFormat F>
void int8Micro(const Int8PanelTile &t, int32_t r0, int32_t p0) {
  const PanelLayout &layout = t.layout;
  const int32_t blocksPerGroup = t.groupSize / kInt8Block;
  const int32_t rowBlocks = t.x.cols / kInt8Block;
  const int16_t *q = t.x.q + int64_t(r0) * t.x.cols;
  const float *d = t.x.scales + int64_t(r0) * rowBlocks;
  const int32_t *qSums = t.x.sums + int64_t(r0) * rowBlocks;
  for (int32_t g = 0; g < layout.groups; ++g) {
    const uint8_t *group = t.panels + p0 * layout.panelBytes + g * layout.groupBytes;
    // The group's float sums, in memory: the block's integer sums take the registers.
    alignas(32) float part[R][P][kPanelOutputs] = {}, xs[R] = {};
    for (int32_t b = 0; b < blocksPerGroup; ++b) {
      const int32_t block = g * blocksPerGroup + b;
      BlockSums<R, P> sums;
      sums.clear();
      if constexpr (F == QuantFormat::kQ8)
        addByteBlock<R, P>(t, group, b, q + block * kInt8Block, sums);
      else
        addNibbleBlock<R, P, F>(t, group, b,
                                t.x.bytes + int64_t(r0) * t.x.cols + block * kInt8Block,
                                qSums + block, rowBlocks, sums);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const float dr = d[r * rowBlocks + block];
        const __m256 scale = _mm256_set1_ps(dr);
        for (int p = 0; p < P; ++p) {
          float *lanes = part[r][p];
          _mm256_store_ps(lanes, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums.v[r][p].lo), scale,
                                                 _mm256_load_ps(lanes)));
          _mm256_store_ps(lanes + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums.v[r][p].hi), scale,
                                                     _mm256_load_ps(lanes + 8)));
        }
        if constexpr (hasQuantMins(F))
          xs[r] = _mm_cvtss_f32(
              _mm_fmadd_ss(_mm_set_ss(static_cast<float>(qSums[r * rowBlocks + block])),
                           _mm_set_ss(dr), _mm_set_ss(xs[r])));
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      __m256 scale[2], offset[2];
      panelGroupScales<F>(group + p * layout.panelBytes + layout.valueBytes, scale, offset);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        float *acc = t.sums + (r0 + r) * kPanelSumStride + (p0 + p) * kPanelOutputs;
        for (int h = 0; h < 2; ++h) {
          const __m256 sum = _mm256_load_ps(part[r][p] + 8 * h);
          __m256 y = g == 0 ? _mm256_mul_ps(sum, scale[h])
                            : _mm256_fmadd_ps(sum, scale[h], _mm256_loadu_ps(acc + 8 * h));
          if constexpr (hasQuantMins(F))
            y = _mm256_fmadd_ps(_mm256_set1_ps(xs[r]), offset[h], y);
          _mm256_storeu_ps(acc + 8 * h, y);
        }
      }
    }
  }
}

// Micro-kernels of up to 6 rows: fewer rows take more panels at once.
template <QuantFormat F> void int8Tile(const Int8PanelTile &t) {
  forRowGroups<6>(t.rows, [&](auto n, int32_t r) {
    constexpr int kPanels = n() == 1 ? 4 : n() == 2 ? 2 : 1;
    forChunks<kPanels>(t.panelCount,
                       [&](auto panels, int32_t p0) { int8Micro<n(), panels(), F>(t, r, p0); });
  });
}

} // namespace

void quantizeRowsAvx2(const float *x, int64_t xStride, int32_t rows, const Int8Rows &out) {
  const int32_t blocks = out.cols / kInt8Block;
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t b = 0; b < blocks; ++b)
      quantizeBlock(x + r * xStride + b * kInt8Block,
                    out.q + int64_t(r) * out.cols + b * kInt8Block,
                    out.bytes + int64_t(r) * out.cols + b * kInt8Block, out.scales[r * blocks + b],
                    out.sums[r * blocks + b]);
}

void panelTileInt8Avx2(const Int8PanelTile &tile) {
  switch (tile.format) {
  case QuantFormat::kQ8:
    return int8Tile<QuantFormat::kQ8>(tile);
  case QuantFormat::kQ4:
    return int8Tile<QuantFormat::kQ4>(tile);
  case QuantFormat::kQ4Min:
    return int8Tile<QuantFormat::kQ4Min>(tile);
  case QuantFormat::kQ4Zero:
    return int8Tile<QuantFormat::kQ4Zero>(tile);
  default: // fp8 formats keep fp32 rows (linear_quant_int8.h)
    return;
  }
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
