// Quantized Linear dot products for AVX-512 (F, BW, VL, DQ), which linear_quant.cc runs from
// CpuIsa::kAvx512 up. Built like linear_avx512.cc: only this file's own functions target AVX-512
// (KILN_TARGET_BEGIN of isa_target.h after the includes, everything in an anonymous namespace).
//
// A micro-kernel holds R rows x O outputs in 16-lane accumulators (1-4 rows x 4 outputs, or 5-8
// rows x 2) and reads the O weight rows' bytes once, front to back, prefetching ahead. Q4 / Q4M:
// per group and output, a table of the 16 weights a nibble stands for (nibbleTable: the exact
// weights); per run of 32 values one permute looks up values 0..15 and, after a shift by 4,
// another values 16..31 (lookUpRun). Q8: 16 signed bytes widened, converted and multiplied by the
// scale (q8Weights, exact). The fp16 scales and mins are widened 16 groups at a time (or, past 4
// rows, one group at a time: forEachGroup). Then each row's x multiplies the 16 weights into its
// accumulator (one fused multiply-add). So lane l sums the products at k = l (mod 16) in
// increasing k for every format, R and O, and the lanes are added in a fixed tree (laneSum): a
// row's result does not depend on the batch. A tile of more than kDirectRows rows first
// dequantizes its weight rows into scratch with the same helpers and then runs micro-kernels of
// up to 6 rows x 4 outputs over them: the same products added in the same order.
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant.h"

#include <cstdint>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu::linear_quant {
namespace {

// How far ahead of its position in its weight rows' bytes a micro-kernel fetches (as
// kernels/cpu/linear_impl.inc's streaming tiles do: rows of a few hundred bytes end before the
// hardware prefetcher ramps up on each).
constexpr int64_t kPrefetchBytes = 8192;

inline __m128i load16Bytes(const uint8_t *p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
}

// The weights of O rows starting at output `out`; `values` advances as they are read.
template <int O> struct Rows {
  const uint8_t *values; // of row `out`; row o is rowBytes further each
  const uint16_t *scales;
  const uint16_t *mins; // Q4M only
  int64_t rowBytes, groupsPerRow;
  Rows(const QuantMatrix &w, int32_t out)
      : values(w.values + out * w.rowBytes), scales(w.scales + int64_t(out) * w.groupsPerRow),
        mins(w.mins ? w.mins + int64_t(out) * w.groupsPerRow : nullptr), rowBytes(w.rowBytes),
        groupsPerRow(w.groupsPerRow) {}
  const uint8_t *row(int o) const { return values + o * rowBytes; }
  // The O rows lie back to back: after `read` bytes of each, the micro-kernel is about O * read
  // bytes into their span; every 64 bytes it fetches the O lines kPrefetchBytes ahead of that.
  void prefetch(const uint8_t *first) const {
    const int64_t read = values - first;
    if (read % 64 == 0)
      for (int o = 0; o < O; ++o)
        _mm_prefetch(reinterpret_cast<const char *>(first + read * O + kPrefetchBytes + 64 * o),
                     _MM_HINT_T0);
  }
};

template <int R, int O>
inline void multiplyRows(const float *x, int64_t xStride, const __m512 (&wv)[O],
                         __m512 (&acc)[R][O]) {
  for (int r = 0; r < R; ++r) {
    const __m512 xv = _mm512_loadu_ps(x + r * xStride);
    for (int o = 0; o < O; ++o)
      acc[r][o] = _mm512_fmadd_ps(xv, wv[o], acc[r][o]);
  }
}

// The fp16 value at p widened, in every lane.
inline __m512 broadcastHalf(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(*p)));
}

// fp16 values [g0, g0 + count) of row o (count <= 16; the other lanes zero), widened.
inline __m512 loadHalves16(const uint16_t *row, int32_t g0, int32_t count) {
  const __mmask16 mask = count >= 16 ? 0xFFFF : __mmask16((1u << count) - 1);
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + g0));
}

// Lane g of v in every lane.
inline __m512 broadcastLane(__m512 v, int32_t g) {
  return _mm512_permutexvar_ps(_mm512_set1_epi32(g), v);
}

// Calls step(g, scale, min) for every group g in order: scale[o] (min[o], Q4M) row o's scale (min)
// of group g in every lane. Widen16 widens 16 groups' values at once and broadcasts each from a
// register (fewer instructions); the micro-kernels of more than 4 rows read each group's from
// memory instead, as holding 16 groups' in registers would spill their accumulators.
template <int O, bool Widen16, class Step>
inline void forEachGroup(const Rows<O> &rows, Step step) {
  const int64_t stride = rows.groupsPerRow;
  __m512 scale[O], min[O] = {};
  if constexpr (!Widen16) {
    for (int32_t g = 0; g < stride; ++g) {
      for (int o = 0; o < O; ++o) {
        scale[o] = broadcastHalf(rows.scales + o * stride + g);
        if (rows.mins)
          min[o] = broadcastHalf(rows.mins + o * stride + g);
      }
      step(g, scale, min);
    }
  } else {
    for (int32_t g0 = 0; g0 < stride; g0 += 16) {
      const int32_t count = stride - g0 < 16 ? static_cast<int32_t>(stride - g0) : 16;
      __m512 scales16[O], mins16[O] = {};
      for (int o = 0; o < O; ++o) {
        scales16[o] = loadHalves16(rows.scales + o * stride, g0, count);
        if (rows.mins)
          mins16[o] = loadHalves16(rows.mins + o * stride, g0, count);
      }
      for (int32_t g = 0; g < count; ++g) {
        for (int o = 0; o < O; ++o) {
          scale[o] = broadcastLane(scales16[o], g);
          if (rows.mins)
            min[o] = broadcastLane(mins16[o], g);
        }
        step(g0 + g, scale, min);
      }
    }
  }
}

// The 16 exact weights of 16 Q8 values: scale * q.
inline __m512 q8Weights(const uint8_t *values, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16Bytes(values))), scale);
}

// The 16 weights a nibble u stands for in a group (the exact weights): Q4 scale * (u - 8), Q4M
// scale * u + min.
inline __m512 nibbleTable(bool hasMin, __m512 scale, __m512 min) {
  const __m512 nibbles = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return hasMin ? _mm512_fmadd_ps(nibbles, scale, min)
                : _mm512_mul_ps(_mm512_sub_ps(nibbles, _mm512_set1_ps(8.0f)), scale);
}

// The weights of a 32-value run (16 bytes): values 0..15 into low, 16..31 into high, each looked
// up by one permute (which reads only the low 4 bits of a lane).
inline void lookUpRun(const uint8_t *run, __m512 table, __m512 &low, __m512 &high) {
  const __m512i bytes = _mm512_cvtepu8_epi32(load16Bytes(run));
  low = _mm512_permutexvar_ps(bytes, table);
  high = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
}

// f(std::integral_constant<int, n>{}) for a run-time n in [1, Max]; nothing for other n.
template <int Max, class F> inline void withCount(int32_t n, F &&f) {
  if constexpr (Max >= 1) {
    if (n == Max)
      return f(std::integral_constant<int, Max>{});
    withCount<Max - 1>(n, f);
  }
}

// f(size, begin) over [0, count) in chunks of Chunk, the last one smaller; size is an
// std::integral_constant, so each chunk size is its own instance.
template <int Chunk, class F> inline void forChunks(int32_t count, F &&f) {
  int32_t begin = 0;
  for (; begin + Chunk <= count; begin += Chunk)
    f(std::integral_constant<int, Chunk>{}, begin);
  withCount<Chunk - 1>(count - begin, [&](auto size) { f(size, begin); });
}

template <int R, int O>
void dotQ8(const QuantMatrix &w, Rows<O> rows, const float *x, int64_t xStride,
           __m512 (&acc)[R][O]) {
  const int32_t steps = w.groupSize / 16;
  const uint8_t *first = rows.values;
  forEachGroup<O, (R <= 4)>(rows, [&](int32_t, const __m512(&scale)[O], const __m512(&)[O]) {
    for (int32_t step = 0; step < steps; ++step, rows.values += 16, x += 16) {
      rows.prefetch(first);
      __m512 wv[O];
      for (int o = 0; o < O; ++o)
        wv[o] = q8Weights(rows.row(o), scale[o]);
      multiplyRows<R, O>(x, xStride, wv, acc);
    }
  });
}

// Per group and output a table of the weights a nibble stands for, then one permute per 16 values.
template <int R, int O>
void dotQ4(const QuantMatrix &w, Rows<O> rows, const float *x, int64_t xStride,
           __m512 (&acc)[R][O]) {
  const int32_t runs = w.groupSize / kQuantSubBlock;
  const uint8_t *first = rows.values;
  forEachGroup<O, (R <= 4)>(rows, [&](int32_t, const __m512(&scale)[O], const __m512(&min)[O]) {
    __m512 table[O];
    for (int o = 0; o < O; ++o)
      table[o] = nibbleTable(rows.mins, scale[o], min[o]);
    for (int32_t run = 0; run < runs; ++run, rows.values += 16, x += 32) {
      rows.prefetch(first);
      __m512 low[O], high[O];
      for (int o = 0; o < O; ++o)
        lookUpRun(rows.row(o), table[o], low[o], high[o]);
      multiplyRows<R, O>(x, xStride, low, acc);
      multiplyRows<R, O>(x + 16, xStride, high, acc);
    }
  });
}

// The 16 lanes as a fixed tree: halves, then quarters, ...
inline float laneSum(__m512 v) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// sums[r * kOutTile + o] for R rows of x and O outputs from `out` (tile-relative `o0`).
template <int R, int O>
void dotMicroTile(const QuantMatrix &w, const DotTile &tile, int32_t r0, int32_t o0, float *sums) {
  __m512 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      acc[r][o] = _mm512_setzero_ps();
  const Rows<O> rows(w, tile.out0 + o0);
  const float *x = tile.x + r0 * tile.xStride;
  if (w.format == QuantFormat::kQ8)
    dotQ8<R, O>(w, rows, x, tile.xStride, acc);
  else
    dotQ4<R, O>(w, rows, x, tile.xStride, acc);
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      sums[(r0 + r) * kOutTile + o0 + o] = laneSum(acc[r][o]);
}

// The fp32 weights of row `row` into dst[0, cols): the very values dotQ8 / dotQ4 multiply by.
void dequantizeRowAvx512(const QuantMatrix &w, int64_t row, float *dst) {
  const Rows<1> rows(w, static_cast<int32_t>(row));
  const uint8_t *values = rows.values;
  forEachGroup<1, true>(rows, [&](int32_t, const __m512(&scale)[1], const __m512(&min)[1]) {
    if (w.format == QuantFormat::kQ8) {
      for (int32_t step = 0; step < w.groupSize / 16; ++step, values += 16, dst += 16)
        _mm512_storeu_ps(dst, q8Weights(values, scale[0]));
      return;
    }
    const __m512 table = nibbleTable(rows.mins, scale[0], min[0]);
    for (int32_t run = 0; run < w.groupSize / kQuantSubBlock; ++run, values += 16, dst += 32) {
      __m512 low, high;
      lookUpRun(values, table, low, high);
      _mm512_storeu_ps(dst, low);
      _mm512_storeu_ps(dst + 16, high);
    }
  });
}

// As dotMicroTile, with the O weight rows already dequantized (`weights`, rows cols apart): the
// same fused multiply-adds in the same order, so the same sums.
template <int R, int O>
void dotDequantizedMicroTile(const float *weights, int32_t cols, const DotTile &tile, int32_t r0,
                             int32_t o0, float *sums) {
  __m512 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      acc[r][o] = _mm512_setzero_ps();
  const float *x = tile.x + r0 * tile.xStride;
  const float *wrows = weights + int64_t(o0) * cols;
  for (int32_t k = 0; k < cols; k += 16) {
    __m512 wv[O];
    for (int o = 0; o < O; ++o)
      wv[o] = _mm512_loadu_ps(wrows + int64_t(o) * cols + k);
    multiplyRows<R, O>(x + k, tile.xStride, wv, acc);
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      sums[(r0 + r) * kOutTile + o0 + o] = laneSum(acc[r][o]);
}

// A tile of more rows than the direct micro-kernels hold: its weight rows dequantized once into
// `weights`, then every 4 outputs against the rows in as few groups of at most six as cover
// them, of sizes as even as can be (8 rows: 4 + 4, not 6 + 2).
void dotDequantizedTile(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights) {
  for (int32_t o = 0; o < tile.outs; ++o)
    dequantizeRowAvx512(w, tile.out0 + o, weights + int64_t(o) * w.cols);
  const int32_t groups = (tile.rows + 5) / 6;
  forChunks<4>(tile.outs, [&](auto outs, int32_t o0) {
    for (int32_t i = 0, r = 0; i < groups; ++i) {
      const int32_t rows = (tile.rows - r + (groups - i) - 1) / (groups - i);
      withCount<6>(rows, [&](auto n) {
        dotDequantizedMicroTile<n(), outs()>(weights, w.cols, tile, r, o0, sums);
      });
      r += rows;
    }
  });
}

} // namespace

// Up to 4 rows: micro-kernels of 4 outputs; 5 to 8 rows (a decode batch of up to 8): all of them
// in one micro-kernel of 2 outputs, so each packed byte is read and looked up once for every row.
void dotTileAvx512(const QuantMatrix &w, const DotTile &tile, float *sums, float *weights) {
  if (tile.rows > kDirectRows)
    return dotDequantizedTile(w, tile, sums, weights);
  withCount<kDirectRows>(tile.rows, [&](auto rows) {
    constexpr int kOuts = rows() <= 4 ? 4 : 2;
    forChunks<kOuts>(tile.outs, [&](auto outs, int32_t o0) {
      dotMicroTile<rows(), outs()>(w, tile, 0, o0, sums);
    });
  });
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
