// fp32 attention on AVX2 + FMA with one (token, head) pair per vector lane (CpuIsa::kAvx2): the
// method of attention_f32_avx512.cc (its top comment has it: work items of up to 16 pairs, a step
// of 16 cache positions whose scores are chains of fused multiply-adds in increasing d from zero,
// the online softmax down the lanes with a lagging max, the values accumulated transposed; items
// of a few pairs put the positions on the lanes instead), with each 16-lane vector held as two
// 8-lane registers. Only the register blocking is this file's own, as AVX2 has 16 registers of 8
// lanes: a step's scores are worked 6, 6 and 4 positions at a time (12 accumulators), the
// accumulators 6, 6 and 4 dimensions at a time, and a few pairs' work 3 pairs at a time. The
// chunked loops of attention_chunk_avx2.cc re-read the cache for every pair and end every score in
// a sum across lanes: a 512-token prefill's attention ran at a fifth of the cores' multiply-add
// rate there.
// A pair's operations and their order are the same in both layouts (its score chain, its step's
// max, the same e^x, its sum and its values in position order), so its output is bit-identical
// whichever item, batch or chunk of a prompt it is computed in, decode included
// (tests/kernels/cpu/attention_test.cc). Built with -ffp-contract=off (kernels/cpu/CMakeLists.txt)
// so that no multiply and add is fused but those named.
#include "kernels/cpu/attention_f32_lanes.h"
#include "kernels/cpu/attention_items.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <utility>
#include <vector>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/attention_lanes.inc"

#include "kernels/cpu/attention_f32_lanes.inc"

#include "kernels/cpu/exp_fma_avx2.inc"

constexpr int32_t kFewGroup = 3; // pairs of a few-pairs item worked at a time

// Two 8-lane registers of a 16-lane vector, and back.
struct Halves {
  __m256 lo, hi;
  __m256 operator[](int h) const { return h ? hi : lo; }
};
Halves halvesOf(F32x16 v) {
  Halves h;
  std::memcpy(&h, &v, sizeof(v));
  return h;
}
Halves halvesOf(I32x16 v) {
  Halves h;
  std::memcpy(&h, &v, sizeof(v));
  return h;
}
F32x16 joined(__m256 lo, __m256 hi) {
  F32x16 v;
  std::memcpy(&v, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char *>(&v) + sizeof(lo), &hi, sizeof(hi));
  return v;
}

// dst[d][n] = pair n's query at dimension d; zero for lanes past `pairs`.
void packQueries(const AttentionArgs &args, const AttentionItem &item, int32_t pairs,
                 const Scratch &s) {
  for (int32_t n = 0; n < kLanePairs; ++n) {
    const float *row = n < pairs ? pairQuery(args, item, n, s.row) : nullptr;
    for (int32_t d = 0; d < args.headDim; ++d)
      s.queries[d * kLanePairs + n] = row ? row[d] : 0.0f;
  }
}

// out[i][l] = sum over d of rows[i][d] * columns[d][l] for P rows (headDim apart) and 16 lanes
// (two registers): one chain of fused multiply-adds a result, in increasing d from zero,
// rows[i][d] broadcast. The scores of the pairs' lanes (rows: a step's keys; columns: the queries
// transposed). P <= 6.
template <int P>
void chainDots(const float *rows, int32_t headDim, const float *columns, float *out) {
  __m256 acc[P][2];
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i)
    acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int32_t d = 0; d < headDim; ++d) {
    const __m256 c0 = _mm256_load_ps(columns + d * 16), c1 = _mm256_load_ps(columns + d * 16 + 8);
#pragma GCC unroll 16
    for (int i = 0; i < P; ++i) {
      const __m256 row = _mm256_broadcast_ss(rows + int64_t(i) * headDim + d);
      acc[i][0] = _mm256_fmadd_ps(row, c0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(row, c1, acc[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < P; ++i) {
    _mm256_store_ps(out + i * 16, acc[i][0]);
    _mm256_store_ps(out + i * 16 + 8, acc[i][1]);
  }
}

// A step's scores on the pairs' lanes: out[j][n] for its 16 key rows (headDim apart).
void stepScores(const float *keys, int32_t headDim, const float *queriesT, float *out) {
  chainDots<6>(keys, headDim, queriesT, out);
  chainDots<6>(keys + 6 * int64_t(headDim), headDim, queriesT, out + 6 * 16);
  chainDots<4>(keys + 12 * int64_t(headDim), headDim, queriesT, out + 12 * 16);
}

// Dimensions [d0, d0 + D) of the accumulators (acc[d][n]): times `correction` (when `rescale`),
// then += weights[j][n] * values[j][d] for j in [j0, j1) in order, one fused multiply-add each.
template <int D>
void valuesBlock(const float *values, int32_t headDim, int32_t d0, const float *weights, int32_t j0,
                 int32_t j1, bool rescale, const __m256 (&correction)[2], float *acc) {
  __m256 a[D][2];
#pragma GCC unroll 16
  for (int i = 0; i < D; ++i)
#pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      a[i][h] = _mm256_load_ps(acc + (d0 + i) * kLanePairs + 8 * h);
      if (rescale)
        a[i][h] = _mm256_mul_ps(a[i][h], correction[h]);
    }
  for (int32_t j = j0; j < j1; ++j) {
    const __m256 w0 = _mm256_load_ps(weights + j * kLanePairs);
    const __m256 w1 = _mm256_load_ps(weights + j * kLanePairs + 8);
    const float *v = values + int64_t(j) * headDim + d0;
#pragma GCC unroll 16
    for (int i = 0; i < D; ++i) {
      const __m256 value = _mm256_broadcast_ss(v + i);
      a[i][0] = _mm256_fmadd_ps(w0, value, a[i][0]);
      a[i][1] = _mm256_fmadd_ps(w1, value, a[i][1]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < D; ++i)
#pragma GCC unroll 16
    for (int h = 0; h < 2; ++h)
      _mm256_store_ps(acc + (d0 + i) * kLanePairs + 8 * h, a[i][h]);
}

// Every dimension of the accumulators, 16 at a time in blocks of 6, 6 and 4.
void accumulateValues(const float *values, int32_t headDim, const float *weights, int32_t j0,
                      int32_t j1, F32x16 correction, float *acc) {
  const Halves halves = halvesOf(correction);
  const __m256 one = _mm256_set1_ps(1.0f); // times 1 is exact: skipped when no max moved
  const bool rescale = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(halves.lo, one, _CMP_NEQ_UQ),
                                                       _mm256_cmp_ps(halves.hi, one, _CMP_NEQ_UQ)));
  const __m256 factors[2] = {halves.lo, halves.hi};
  for (int32_t d0 = 0; d0 < headDim; d0 += 16) {
    valuesBlock<6>(values, headDim, d0, weights, j0, j1, rescale, factors, acc);
    valuesBlock<6>(values, headDim, d0 + 6, weights, j0, j1, rescale, factors, acc);
    valuesBlock<4>(values, headDim, d0 + 12, weights, j0, j1, rescale, factors, acc);
  }
}

// The pairs' outputs: each accumulator (acc[d][n]) over its pair's sum, in place, then pair n's
// column in the output's type.
void storePairs(const AttentionArgs &args, const AttentionItem &item, int32_t pairs, F32x16 sum,
                const Scratch &s) {
  const Halves total = halvesOf(sum);
  for (int32_t d = 0; d < args.headDim; ++d)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float *acc = s.acc + d * kLanePairs + 8 * h;
      _mm256_store_ps(acc, _mm256_div_ps(_mm256_load_ps(acc), total[h]));
    }
  for (int32_t n = 0; n < pairs; ++n) {
    for (int32_t d = 0; d < args.headDim; ++d)
      s.row[d] = s.acc[d * kLanePairs + n];
    storeRun(s.row, args.headDim, args.out, args.type, pairOffset(args, item, n));
  }
}

// 8 rows of 8 floats, transposed in place.
void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// dst[d][j] = keys[j][d] for the 16 key rows at `keys` (headDim apart).
void transposeKeys(const float *keys, int32_t headDim, float *dst) {
  for (int32_t d0 = 0; d0 < headDim; d0 += 8)
    for (int32_t j0 = 0; j0 < kLanePositions; j0 += 8) {
      __m256 r[8];
      for (int32_t j = 0; j < 8; ++j)
        r[j] = _mm256_loadu_ps(keys + int64_t(j0 + j) * headDim + d0);
      transpose8(r);
      for (int32_t i = 0; i < 8; ++i)
        _mm256_store_ps(dst + (d0 + i) * kLanePositions + j0, r[i]);
    }
}

// All ones where first <= position < length (int32 lanes).
__m256 visibleMask(__m256i position, __m256i first, __m256i length) {
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(first, position),
                                                 _mm256_cmpgt_epi32(length, position)));
}

// laggingMax (attention_f32_lanes.inc) on 8 lanes.
__m256 laggingMax8(__m256 max, __m256 rowMax) {
  const __m256 passed =
      _mm256_cmp_ps(rowMax, _mm256_add_ps(max, _mm256_set1_ps(kSlack)), _CMP_GT_OQ);
  return _mm256_blendv_ps(max, rowMax, passed);
}

// The pairs' lanes: scores (16 positions from `position0`, 16 pairs a row) to weights, in place:
// scaled, and masked by selection (positions a pair does not see are -inf, whatever their score,
// NaN included), the running max and sum updated, each half of the lanes on its own. Returns the
// factor the accumulators are rescaled by (1 where a pair has seen nothing yet, or its max did not
// move).
F32x16 softmaxStep(LaneSoftmax &state, float *scores, int32_t position0, float scale) {
  const __m256 minusInf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const Halves first = halvesOf(state.first), length = halvesOf(state.length);
  const Halves max = halvesOf(state.max), sum = halvesOf(state.sum);
  __m256 newMax[2], correction[2], newSum[2];
#pragma GCC unroll 16
  for (int h = 0; h < 2; ++h) {
    float *column = scores + 8 * h;
    __m256 rowMax = minusInf;
    for (int32_t j = 0; j < kLanePositions; ++j) {
      const __m256i position = _mm256_set1_epi32(position0 + j);
      const __m256 s =
          _mm256_mul_ps(_mm256_load_ps(column + j * kLanePairs), _mm256_set1_ps(scale));
      const __m256 visible =
          visibleMask(position, _mm256_castps_si256(first[h]), _mm256_castps_si256(length[h]));
      const __m256 masked = _mm256_blendv_ps(minusInf, s, visible);
      _mm256_store_ps(column + j * kLanePairs, masked);
      rowMax = _mm256_max_ps(rowMax, masked); // rowMax > masked ? rowMax : masked
    }
    newMax[h] = laggingMax8(max[h], rowMax);
    const __m256 seen = _mm256_cmp_ps(max[h], minusInf, _CMP_GT_OQ);
    correction[h] =
        _mm256_blendv_ps(_mm256_set1_ps(1.0f), expFma8(_mm256_sub_ps(max[h], newMax[h])), seen);
    newSum[h] = _mm256_mul_ps(sum[h], correction[h]);
    const __m256 live = _mm256_cmp_ps(newMax[h], minusInf, _CMP_GT_OQ);
    for (int32_t j = 0; j < kLanePositions; ++j) {
      const __m256 w = _mm256_and_ps(
          live, expFma8(_mm256_sub_ps(_mm256_load_ps(column + j * kLanePairs), newMax[h])));
      newSum[h] = _mm256_add_ps(newSum[h], w);
      _mm256_store_ps(column + j * kLanePairs, w);
    }
  }
  state.max = joined(newMax[0], newMax[1]);
  state.sum = joined(newSum[0], newSum[1]);
  return joined(correction[0], correction[1]);
}

// The scores of P pairs (P * S <= 6) over S steps with the positions on the lanes:
// out[s * stride + i][l] = the chain of row i of the pairs' queries (headDim apart) against
// position l of step s's keys transposed (keysT + s * headDim * 16), the very operations of
// chainDots for that pair and position.
template <int P, int S>
void fewScores(const float *queries, int32_t headDim, const float *keysT, float *out,
               int32_t stride) {
  __m256 acc[S][P][2];
#pragma GCC unroll 16
  for (int t = 0; t < S; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < P; ++i)
      acc[t][i][0] = acc[t][i][1] = _mm256_setzero_ps();
  for (int32_t d = 0; d < headDim; ++d)
#pragma GCC unroll 16
    for (int t = 0; t < S; ++t) {
      const float *column = keysT + (int64_t(t) * headDim + d) * 16;
      const __m256 k0 = _mm256_load_ps(column), k1 = _mm256_load_ps(column + 8);
#pragma GCC unroll 16
      for (int i = 0; i < P; ++i) {
        const __m256 q = _mm256_broadcast_ss(queries + int64_t(i) * headDim + d);
        acc[t][i][0] = _mm256_fmadd_ps(q, k0, acc[t][i][0]);
        acc[t][i][1] = _mm256_fmadd_ps(q, k1, acc[t][i][1]);
      }
    }
#pragma GCC unroll 16
  for (int t = 0; t < S; ++t)
#pragma GCC unroll 16
    for (int i = 0; i < P; ++i) {
      _mm256_store_ps(out + (t * stride + i) * 16, acc[t][i][0]);
      _mm256_store_ps(out + (t * stride + i) * 16 + 8, acc[t][i][1]);
    }
}

// fewScores for pairs [G0, P) of an item, kFewGroup at a time.
template <int P, int S, int G0 = 0>
void fewScoresGroups(const float *queries, int32_t headDim, const float *keysT, float *out) {
  if constexpr (G0 < P) {
    fewScores<std::min(kFewGroup, P - G0), S>(queries + int64_t(G0) * headDim, headDim, keysT,
                                              out + G0 * 16, P);
    fewScoresGroups<P, S, G0 + kFewGroup>(queries, headDim, keysT, out);
  }
}

// The largest of 8 lanes (exact: the same value whatever the order, NaN aside).
float maxOf(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// softmaxStep for the P pairs (lane n of `state`) with their 16 positions' scores on the lanes of
// scores + 16 n, in place: the same operations on the same values, each pair's running sum still
// added in position order. corrections[n]: pair n's factor.
template <int P>
void fewSoftmax(LaneSoftmax &state, float *scores, int32_t position0, float scale,
                float (&corrections)[P]) {
  const float inf = std::numeric_limits<float>::infinity();
  const __m256 minusInf = _mm256_set1_ps(-inf);
  const __m256i position[2] = {
      _mm256_add_epi32(_mm256_set1_epi32(position0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
      _mm256_add_epi32(_mm256_set1_epi32(position0 + 8),
                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))};
  float sums[P];
#pragma GCC unroll 16
  for (int n = 0; n < P; ++n) {
    float *row = scores + n * kLanePositions;
    const __m256i first = _mm256_set1_epi32(state.first[n]);
    const __m256i length = _mm256_set1_epi32(state.length[n]);
    __m256 masked[2];
#pragma GCC unroll 16
    for (int h = 0; h < 2; ++h)
      masked[h] = _mm256_blendv_ps(
          minusInf, _mm256_mul_ps(_mm256_load_ps(row + 8 * h), _mm256_set1_ps(scale)),
          visibleMask(position[h], first, length));
    const __m256 max = _mm256_set1_ps(state.max[n]);
    const __m256 newMax =
        laggingMax8(max, _mm256_set1_ps(maxOf(_mm256_max_ps(masked[0], masked[1]))));
    const float maxNow = _mm256_cvtss_f32(newMax);
    corrections[n] =
        state.max[n] > -inf ? _mm256_cvtss_f32(expFma8(_mm256_sub_ps(max, newMax))) : 1.0f;
    const __m256 live = _mm256_cmp_ps(newMax, minusInf, _CMP_GT_OQ);
#pragma GCC unroll 16
    for (int h = 0; h < 2; ++h)
      _mm256_store_ps(row + 8 * h, _mm256_and_ps(live, expFma8(_mm256_sub_ps(masked[h], newMax))));
    sums[n] = state.sum[n] * corrections[n];
    state.max[n] = maxNow;
  }
  for (int32_t j = 0; j < kLanePositions; ++j)
#pragma GCC unroll 16
    for (int n = 0; n < P; ++n)
      sums[n] += scores[n * kLanePositions + j];
#pragma GCC unroll 16
  for (int n = 0; n < P; ++n)
    state.sum[n] = sums[n];
}

// For P pairs' accumulators (rows headDim apart, weights rows 16 apart), dimensions
// [d0, d0 + 8 C): acc = acc * correction, then += weights[j] * values[j][d] for j in [j0, j1) in
// order, as valuesBlock does for each pair.
template <int P, int C>
void fewValues(const float *values, int32_t headDim, int32_t d0, const float *weights, int32_t j0,
               int32_t j1, const float *corrections, float *acc) {
  __m256 a[P][C];
#pragma GCC unroll 16
  for (int n = 0; n < P; ++n)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      a[n][c] = _mm256_load_ps(acc + int64_t(n) * headDim + d0 + 8 * c);
      if (corrections[n] != 1.0f) // times 1 is exact: skipped
        a[n][c] = _mm256_mul_ps(a[n][c], _mm256_set1_ps(corrections[n]));
    }
  for (int32_t j = j0; j < j1; ++j)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m256 v = _mm256_loadu_ps(values + int64_t(j) * headDim + d0 + 8 * c);
#pragma GCC unroll 16
      for (int n = 0; n < P; ++n)
        a[n][c] =
            _mm256_fmadd_ps(_mm256_broadcast_ss(weights + n * kLanePositions + j), v, a[n][c]);
    }
#pragma GCC unroll 16
  for (int n = 0; n < P; ++n)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      _mm256_store_ps(acc + int64_t(n) * headDim + d0 + 8 * c, a[n][c]);
}

// fewValues over every dimension for pairs [G0, P), kFewGroup at a time: 32 dimensions a pass,
// then 16.
template <int P, int G0 = 0>
void fewValuesGroups(const float *values, int32_t headDim, const float *weights, int32_t j0,
                     int32_t j1, const float *corrections, float *acc) {
  if constexpr (G0 < P) {
    constexpr int G = std::min(kFewGroup, P - G0);
    const float *w = weights + G0 * kLanePositions;
    float *a = acc + int64_t(G0) * headDim;
    int32_t d0 = 0;
    for (; d0 + 32 <= headDim; d0 += 32)
      fewValues<G, 4>(values, headDim, d0, w, j0, j1, corrections + G0, a);
    if (d0 < headDim)
      fewValues<G, 2>(values, headDim, d0, w, j0, j1, corrections + G0, a);
    fewValuesGroups<P, G0 + kFewGroup>(values, headDim, weights, j0, j1, corrections, acc);
  }
}

// An item of P <= kFewPairs pairs with the positions on the lanes: each step's keys transposed
// (two steps' at a time into s.fewKeys), the pairs' scores as rows in s.weights, their
// accumulators as rows in s.acc, every pair doing the lanes' operations in the lanes' order.
template <int P>
void attendFewPairs(const AttentionArgs &args, const AttentionItem &item, const Scratch &s) {
  const int32_t headDim = args.headDim;
  int32_t lo, hi;
  LaneSoftmax state = startSoftmax(args, item, P, lo, hi);
  for (int32_t n = 0; n < P; ++n) // the pairs' queries as fp32 rows, headDim apart
    loadRun(args.q, args.type, pairOffset(args, item, n), headDim,
            s.fewQueries + int64_t(n) * headDim);
  std::memset(s.acc, 0, sizeof(float) * P * headDim);
  const ItemCache cache = itemCache(args, item);
  for (int32_t start = lo / kLanePositions * kLanePositions; start < hi;) {
    const int32_t steps = start + kLanePositions < hi ? 2 : 1;
    cache.prefetchSteps(start + steps * kLanePositions, steps, hi);
    for (int32_t t = 0; t < steps; ++t)
      transposeKeys(cache.keys(start + t * kLanePositions, s), headDim,
                    s.fewKeys + int64_t(t) * headDim * kLanePositions);
    if (steps == 2)
      fewScoresGroups<P, 2>(s.fewQueries, headDim, s.fewKeys, s.weights);
    else
      fewScoresGroups<P, 1>(s.fewQueries, headDim, s.fewKeys, s.weights);
    for (int32_t t = 0; t < steps; ++t, start += kLanePositions) {
      float *weights = s.weights + t * P * kLanePositions;
      float corrections[P];
      fewSoftmax<P>(state, weights, start, args.scale, corrections);
      const int32_t j0 = std::max(lo - start, 0), j1 = std::min(hi - start, kLanePositions);
      fewValuesGroups<P>(cache.values(start, s), headDim, weights, j0, j1, corrections, s.acc);
    }
  }
  for (int32_t n = 0; n < P; ++n) {
    const float *acc = s.acc + int64_t(n) * headDim;
    const __m256 total = _mm256_set1_ps(state.sum[n]);
    for (int32_t d = 0; d < headDim; d += 8)
      _mm256_storeu_ps(s.row + d, _mm256_div_ps(_mm256_load_ps(acc + d), total));
    storeRun(s.row, headDim, args.out, args.type, pairOffset(args, item, n));
  }
}

// attendFewPairs<P> for P = 1..kFewPairs.
using FewPairsFn = void (*)(const AttentionArgs &, const AttentionItem &, const Scratch &);
template <size_t... P>
constexpr std::array<FewPairsFn, sizeof...(P)> fewPairsTable(std::index_sequence<P...>) {
  return {&attendFewPairs<int(P) + 1>...};
}
constexpr auto kFewPairsFns = fewPairsTable(std::make_index_sequence<kFewPairs>());

void attendItem(const AttentionArgs &args, const AttentionItem &item, const Scratch &s) {
  const int32_t headDim = args.headDim;
  const int32_t pairs = item.tokens * item.heads;
  if (pairs <= kFewPairs)
    return kFewPairsFns[pairs - 1](args, item, s);
  int32_t lo, hi;
  LaneSoftmax state = startSoftmax(args, item, pairs, lo, hi);
  packQueries(args, item, pairs, s);
  std::memset(s.acc, 0, sizeof(float) * kLanePairs * headDim);
  const ItemCache cache = itemCache(args, item);
  for (int32_t start = lo / kLanePositions * kLanePositions; start < hi; start += kLanePositions) {
    const float *keys = cache.keys(start, s), *values = cache.values(start, s);
    stepScores(keys, headDim, s.queries, s.weights);
    const F32x16 correction = softmaxStep(state, s.weights, start, args.scale);
    accumulateValues(values, headDim, s.weights, std::max(lo - start, 0),
                     std::min(hi - start, kLanePositions), correction, s.acc);
  }
  storePairs(args, item, pairs, state.sum, s);
}

} // namespace

void attentionF32LanesAvx2(const AttentionArgs &args) {
  runLaneItems(args, attendItem);
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
