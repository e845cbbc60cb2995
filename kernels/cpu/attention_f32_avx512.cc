// fp32 attention on AVX-512 with one (token, head) pair per vector lane (CpuIsa::kAvx512 and
// above): the same paged, causal (optionally windowed), grouped-query attention as attention.cc,
// in fp32 (half queries and cache widened, as attention.cc widens them, so a half input gives the
// fp32 result of its widened values), laid out as attention_amx.cc lays out its tiles, so each
// cache position is read once for 16 pairs and no dot product ends in a sum across lanes
// (attention.cc's per-pair loops re-read the cache for every pair and add 16 lanes per score).
//
// A work item is up to 16 pairs of one sequence sharing a kv head, a lane each (laneItems,
// attention_lanes.inc). Its queries are packed once, transposed: row d holds the pairs' dimension
// d. Per 16 cache positions aligned to 16 (a cache block holds a whole number of them):
//   scores: s_j = sum over d of k_j[d] q^T[d] for the 16 positions j at once, each one chain of
//     fused multiply-adds in increasing d from zero, k_j[d] broadcast;
//   online softmax down the lanes (softmaxStep): scale, mask by selection, a running max that
//     moves only when a score passes it by more than kSlack (so the accumulators are rarely
//     rescaled: times 1 is skipped), e^x with fused multiply-adds (exp_fma_lanes.inc), running
//     sum in position order;
//   values: acc^T[d] = acc^T[d] x correction, then acc^T[d] += w_j v_j[d] for the positions in
//     order, one fused multiply-add each, v_j[d] broadcast, 16 dimensions in registers at a time.
// Every lane is its own computation, so a pair's output is bit-identical whichever item, batch or
// chunk of a prompt it is computed in, decode included: positions it does not see are exact
// no-ops (weight 0, correction 1). Values are used only at positions some pair of the item sees
// (a cache slot not yet written may hold anything; a half cache's step is widened whole and its
// other rows left unused); scores of other positions are masked by selection, so whatever they
// hold is dropped.
//
// A prompt's items run up to three at a time (attendBundle: consecutive tokens of one sequence and
// kv head): the keys and values of a step are then read once for 48 pairs, and each broadcast of
// one of them feeds three items' lanes, so the scores and values loops are bound by fused
// multiply-adds rather than by loads; each item still does its own operations in its own order.
//
// An item of a few pairs (decode: one token's group of heads, 3 for SmolLM2-135M) would leave
// most lanes idle, so it puts the 16 positions on the lanes instead (attendFewPairs): the step's
// keys transposed once, then per pair the same operations in the same order on the same values
// (s_j = fma(q[d], k_j[d], s_j) in increasing d, the step's softmax on one vector, the sum in
// position order, acc[d] = fma(w_j, v_j[d], acc[d]) in position order), the pairs side by side
// and two steps' scores at once, so that many chains are in flight (one pair's chains alone left
// the cores waiting on fused multiply-add latency: a third of a batch-32 decode step), so its
// output is bit-identical to the lanes' (tests/kernels/cpu/attention_test.cc: a prompt at once and
// token by token). For that no multiply and add may be fused but those named (_mm512_fmadd_ps): the
// file is built with -ffp-contract=off (kernels/cpu/CMakeLists.txt), since GCC fuses a * b + c in
// C++ otherwise, in ISO mode too.
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

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/exp_fma_lanes.inc"

#include "kernels/cpu/attention_lanes.inc"

#include "kernels/cpu/transpose16_avx512.inc"

#include "kernels/cpu/attention_f32_lanes.inc"

constexpr int32_t kDims = 16; // dimensions of acc^T held in registers at a time

// dst[d][n] = pair n's query at dimension d; zero for lanes past `pairs`: the pairs' rows, 16
// dimensions at a time, transposed in registers (half queries widened first into s.values, free
// until the first step).
void packQueries(const AttentionArgs &args, const AttentionItem &item, int32_t pairs,
                 const Scratch &s) {
  const float *rows[kLanePairs];
  for (int32_t n = 0; n < pairs; ++n)
    rows[n] = pairQuery(args, item, n, s.values + int64_t(n) * args.headDim);
  for (int32_t d0 = 0; d0 < args.headDim; d0 += kDims) {
    __m512 r[kLanePairs];
    for (int32_t n = 0; n < kLanePairs; ++n)
      r[n] = n < pairs ? _mm512_loadu_ps(rows[n] + d0) : _mm512_setzero_ps();
    transpose16(r);
    for (int32_t i = 0; i < kDims; ++i)
      _mm512_store_ps(s.queries + (d0 + i) * kLanePairs, r[i]);
  }
}

// The pairs' outputs: each accumulator (acc[d][n]) over its pair's sum, then 16 dimensions at a
// time transposed in registers into pair rows (in s.values, free after the last step), each
// stored in the output's type.
void storePairs(const AttentionArgs &args, const AttentionItem &item, int32_t pairs, F32x16 sum,
                const Scratch &s) {
  for (int32_t d0 = 0; d0 < args.headDim; d0 += kDims) {
    __m512 r[kDims];
    for (int32_t i = 0; i < kDims; ++i)
      r[i] = _mm512_div_ps(_mm512_load_ps(s.acc + (d0 + i) * kLanePairs), (__m512)sum);
    transpose16(r);
    for (int32_t n = 0; n < pairs; ++n)
      _mm512_storeu_ps(s.values + int64_t(n) * args.headDim + d0, r[n]);
  }
  for (int32_t n = 0; n < pairs; ++n)
    storeRun(s.values + int64_t(n) * args.headDim, args.headDim, args.out, args.type,
             pairOffset(args, item, n));
}

// dst[d][j] = keys[j][d] for the 16 key rows at `keys` (headDim apart).
void transposeKeys(const float *keys, int32_t headDim, float *dst) {
  for (int32_t d0 = 0; d0 < headDim; d0 += kDims) {
    __m512 r[16];
    for (int32_t j = 0; j < kLanePositions; ++j)
      r[j] = _mm512_loadu_ps(keys + int64_t(j) * headDim + d0);
    transpose16(r);
    for (int32_t i = 0; i < kDims; ++i)
      _mm512_store_ps(dst + (d0 + i) * kLanePositions, r[i]);
  }
}

// The scores of P pairs over S steps at once, the positions on the lanes: out[s][i][l] = sum over d
// of queries[i][d] * keysT[s][d][l], one chain of fused multiply-adds a result, in increasing d
// from zero, the query broadcast: the very operations bundleDots does for a pair with the
// positions as rows, so a pair's scores are the same in either layout.
template <int P, int S>
void fewScores(const float *queries, int32_t headDim, const float *keysT, float *out) {
  __m512 acc[S][P];
  for (int t = 0; t < S; ++t)
    for (int i = 0; i < P; ++i)
      acc[t][i] = _mm512_setzero_ps();
  for (int32_t d = 0; d < headDim; ++d)
    for (int t = 0; t < S; ++t) {
      const __m512 column = _mm512_load_ps(keysT + (int64_t(t) * headDim + d) * 16);
      for (int i = 0; i < P; ++i)
        acc[t][i] =
            _mm512_fmadd_ps(_mm512_set1_ps(queries[int64_t(i) * headDim + d]), column, acc[t][i]);
    }
  for (int t = 0; t < S; ++t)
    for (int i = 0; i < P; ++i)
      _mm512_store_ps(out + (t * P + i) * 16, acc[t][i]);
}

// e^x of expFmaLanes (exp_fma_lanes.inc) on every lane, or 0 where a lane is not `live`.
__m512 weightsOf(__m512 x, __mmask16 live) {
  return _mm512_maskz_mov_ps(live, expFmaLanes(x));
}

// The pairs' lanes: scores (16 positions from `position0`, 16 pairs a row) to weights, in place:
// scaled, and masked by selection (positions a pair does not see are -inf, whatever their score,
// NaN included), the running max and sum updated. Returns the factor the accumulators are
// rescaled by (1 where a pair has seen nothing yet, or its max did not move).
//
// Two shortcuts give the same bits: where every pair sees all 16 positions (most steps of a
// prompt) only the padding lanes are masked, by one blend; and where every live lane's scores
// are finite and none lies more than -kExpFmaMin below its max (the weights' arguments then lie in
// [kExpFmaMin, kSlack]: x - max is monotonic in x), e^x needs none of expFmaLanes' clamps.
F32x16 softmaxStep(LaneSoftmax &state, float *scores, int32_t position0, float scale) {
  const F32x16 minusInf = F32x16{} - std::numeric_limits<float>::infinity();
  const __m512i first = (__m512i)state.first, length = (__m512i)state.length;
  const __mmask16 pairs = _mm512_cmpgt_epi32_mask(length, _mm512_setzero_si512());
  const __mmask16 seeAll =
      _mm512_cmple_epi32_mask(first, _mm512_set1_epi32(position0)) &
      _mm512_cmpge_epi32_mask(length, _mm512_set1_epi32(position0 + kLanePositions));
  const bool whole = seeAll == pairs;
  F32x16 rowMax = minusInf, rowMin = -minusInf;
  for (int32_t j = 0; j < kLanePositions; ++j) {
    const F32x16 s = loadF32x16(scores + j * kLanePairs) * scale;
    F32x16 masked;
    if (whole) {
      masked = (F32x16)_mm512_mask_mov_ps((__m512)minusInf, pairs, (__m512)s);
    } else {
      const I32x16 position = I32x16{} + (position0 + j);
      masked = ((position >= state.first) & (position < state.length)) ? s : minusInf;
    }
    storeF32x16(scores + j * kLanePairs, masked);
    rowMax = rowMax > masked ? rowMax : masked;
    rowMin = rowMin < masked ? rowMin : masked;
  }
  const F32x16 newMax = laggingMax(state.max, rowMax);
  const __mmask16 live = _mm512_cmp_ps_mask((__m512)newMax, (__m512)minusInf, _CMP_GT_OQ);
  const __mmask16 seen = _mm512_cmp_ps_mask((__m512)state.max, (__m512)minusInf, _CMP_GT_OQ);
  const F32x16 correction = (F32x16)_mm512_mask_mov_ps(_mm512_set1_ps(1.0f), seen,
                                                       expFmaLanes((__m512)(state.max - newMax)));
  state.sum = state.sum * correction;
  // Ordered: a NaN (or an infinite max, whose lowest argument is then -inf or NaN) fails it.
  const __mmask16 inRange = _mm512_mask_cmp_ps_mask(live, (__m512)(rowMin - newMax),
                                                    _mm512_set1_ps(kExpFmaMin), _CMP_GE_OQ);
  const bool plainExp = inRange == live;
  for (int32_t j = 0; j < kLanePositions; ++j) {
    const __m512 x = (__m512)(loadF32x16(scores + j * kLanePairs) - newMax);
    const F32x16 w =
        (F32x16)(plainExp ? _mm512_maskz_mov_ps(live, expFmaInRange(x)) : weightsOf(x, live));
    state.sum = state.sum + w;
    storeF32x16(scores + j * kLanePairs, w);
  }
  state.max = newMax;
  return correction;
}

// softmaxStep for the P pairs (lane n of `state`) with their 16 positions' scores on the lanes of
// scores + 16 n, in place: the same operations on the same values, each pair's running sum
// still added in position order, the pairs' sums side by side. corrections[n]: pair n's factor.
template <int P>
void fewSoftmax(LaneSoftmax &state, float *scores, int32_t position0, float scale,
                float (&corrections)[P]) {
  const F32x16 minusInf = F32x16{} - std::numeric_limits<float>::infinity();
  I32x16 position;
  for (int32_t j = 0; j < kLanePositions; ++j)
    position[j] = position0 + j;
  float sums[P];
  for (int n = 0; n < P; ++n) {
    float *row = scores + n * kLanePositions;
    const F32x16 s = loadF32x16(row) * scale;
    const F32x16 masked =
        ((position >= state.first[n]) & (position < state.length[n])) ? s : minusInf;
    const F32x16 rowMax = F32x16{} + _mm512_reduce_max_ps((__m512)masked);
    const F32x16 max = F32x16{} + state.max[n];
    const F32x16 newMax = laggingMax(max, rowMax);
    const bool live = newMax[0] > -std::numeric_limits<float>::infinity();
    const bool seen = max[0] > -std::numeric_limits<float>::infinity();
    corrections[n] = seen ? _mm512_cvtss_f32(expFmaLanes((__m512)(max - newMax))) : 1.0f;
    storeF32x16(row, (F32x16)weightsOf((__m512)(masked - newMax), live ? 0xffff : 0));
    sums[n] = state.sum[n] * corrections[n];
    state.max[n] = newMax[0];
  }
  for (int32_t j = 0; j < kLanePositions; ++j)
    for (int n = 0; n < P; ++n)
      sums[n] += scores[n * kLanePositions + j];
  for (int n = 0; n < P; ++n)
    state.sum[n] = sums[n];
}

// For the P pairs' accumulators (rows headDim apart), dimensions [d0, d0 + 16 C):
// acc = acc * correction, then += weights[j] * values[j][d] for j in [j0, j1) in order.
template <int P, int C>
void fewValues(const float *values, int32_t headDim, int32_t d0, const float *weights, int32_t j0,
               int32_t j1, const float (&corrections)[P], float *acc) {
  __m512 a[P][C];
  for (int n = 0; n < P; ++n)
    for (int c = 0; c < C; ++c) {
      a[n][c] = _mm512_load_ps(acc + int64_t(n) * headDim + d0 + 16 * c);
      if (corrections[n] != 1.0f) // times 1 is exact: skipped
        a[n][c] = _mm512_mul_ps(a[n][c], _mm512_set1_ps(corrections[n]));
    }
  for (int32_t j = j0; j < j1; ++j)
    for (int c = 0; c < C; ++c) {
      const __m512 v = _mm512_loadu_ps(values + int64_t(j) * headDim + d0 + 16 * c);
      for (int n = 0; n < P; ++n)
        a[n][c] = _mm512_fmadd_ps(_mm512_set1_ps(weights[n * kLanePositions + j]), v, a[n][c]);
    }
  for (int n = 0; n < P; ++n)
    for (int c = 0; c < C; ++c)
      _mm512_store_ps(acc + int64_t(n) * headDim + d0 + 16 * c, a[n][c]);
}

// An item of P <= kFewPairs pairs with the positions on the lanes: each step's keys transposed
// (two steps' at a time into s.fewKeys, so twice the score chains are in flight), the pairs'
// scores as rows in s.weights, their accumulators as rows in s.acc. Every pair does the lanes'
// operations in the lanes' order (see the top of this file), the pairs side by side.
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
      fewScores<P, 2>(s.fewQueries, headDim, s.fewKeys, s.weights);
    else
      fewScores<P, 1>(s.fewQueries, headDim, s.fewKeys, s.weights);
    for (int32_t t = 0; t < steps; ++t, start += kLanePositions) {
      float *weights = s.weights + t * P * kLanePositions;
      float corrections[P];
      fewSoftmax<P>(state, weights, start, args.scale, corrections);
      const float *values = cache.values(start, s);
      const int32_t j0 = std::max(lo - start, 0), j1 = std::min(hi - start, kLanePositions);
      int32_t d0 = 0;
      for (; d0 + 32 <= headDim; d0 += 32)
        fewValues<P, 2>(values, headDim, d0, weights, j0, j1, corrections, s.acc);
      if (d0 < headDim)
        fewValues<P, 1>(values, headDim, d0, weights, j0, j1, corrections, s.acc);
    }
  }
  for (int32_t n = 0; n < P; ++n) {
    const float *acc = s.acc + int64_t(n) * headDim;
    const __m512 total = _mm512_set1_ps(state.sum[n]);
    for (int32_t d = 0; d < headDim; d += kDims)
      _mm512_storeu_ps(s.row + d, _mm512_div_ps(_mm512_load_ps(acc + d), total));
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

// Up to kBundleItems lane items of one sequence and kv head run side by side (attendBundle): each
// key or value broadcast then serves all their lanes, so a pass holds kBundleRows positions
// (scores) or dimensions (values) of every item, 24 accumulators at 3 items, and loads one vector
// or broadcast per 2.2 fused multiply-adds (an item alone: per 0.9; a 16-row pass of one item,
// before bundles, per 0.94).
constexpr int32_t kBundleItems = 3;
constexpr int32_t kBundleRows = 8;

// out[b][j][n] = sum over d of keys[j][d] * queries[b][d][n]: item b's scores (its queries
// transposed) against the step's 16 keys (headDim apart), one chain of fused multiply-adds per
// (position, lane), in increasing d from zero, the key broadcast.
template <int B>
void bundleDots(const float *keys, int32_t headDim, const float *const (&queries)[B],
                float *const (&out)[B]) {
  for (int32_t j0 = 0; j0 < kLanePositions; j0 += kBundleRows) {
    __m512 acc[kBundleRows][B];
#pragma GCC unroll 8
    for (int i = 0; i < kBundleRows; ++i)
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b)
        acc[i][b] = _mm512_setzero_ps();
    const float *rows = keys + int64_t(j0) * headDim;
    for (int32_t d = 0; d < headDim; ++d) {
      __m512 column[B];
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b)
        column[b] = _mm512_load_ps(queries[b] + d * kLanePairs);
#pragma GCC unroll 8
      for (int i = 0; i < kBundleRows; ++i) {
        const __m512 key = _mm512_set1_ps(rows[int64_t(i) * headDim + d]);
#pragma GCC unroll 3
        for (int b = 0; b < B; ++b)
          acc[i][b] = _mm512_fmadd_ps(key, column[b], acc[i][b]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < kBundleRows; ++i)
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b)
        _mm512_store_ps(out[b] + (j0 + i) * kLanePairs, acc[i][b]);
  }
}

// acc[b][d][n] = acc[b][d][n] * correction[b][n] (skipped where every lane's is 1: times 1 is
// exact, and the lagging max makes it the common step), then += weights[b][j][n] * values[j][d]
// for the step's positions j in [j0, j1) in order (those some item sees; where one of them sees
// none its weights are 0, an exact no-op), one fused multiply-add each, the value broadcast.
template <int B>
void bundleValues(const float *values, int32_t headDim, const float *const (&weights)[B],
                  int32_t j0, int32_t j1, const __m512 (&correction)[B], float *const (&acc)[B]) {
  bool rescale[B];
  for (int b = 0; b < B; ++b)
    rescale[b] = _mm512_cmp_ps_mask(correction[b], _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
  for (int32_t d0 = 0; d0 < headDim; d0 += kBundleRows) {
    __m512 a[kBundleRows][B];
#pragma GCC unroll 8
    for (int i = 0; i < kBundleRows; ++i)
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b) {
        a[i][b] = _mm512_load_ps(acc[b] + (d0 + i) * kLanePairs);
        if (rescale[b])
          a[i][b] = _mm512_mul_ps(a[i][b], correction[b]);
      }
    for (int32_t j = j0; j < j1; ++j) {
      __m512 w[B];
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b)
        w[b] = _mm512_load_ps(weights[b] + j * kLanePairs);
      const float *v = values + int64_t(j) * headDim + d0;
#pragma GCC unroll 8
      for (int i = 0; i < kBundleRows; ++i) {
        const __m512 value = _mm512_set1_ps(v[i]);
#pragma GCC unroll 3
        for (int b = 0; b < B; ++b)
          a[i][b] = _mm512_fmadd_ps(w[b], value, a[i][b]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < kBundleRows; ++i)
#pragma GCC unroll 3
      for (int b = 0; b < B; ++b)
        _mm512_store_ps(acc[b] + (d0 + i) * kLanePairs, a[i][b]);
  }
}

// B lane items (more than kFewPairs pairs each) of one sequence and kv head, each with its own
// scratch (s[b]), over the steps any of them sees: per item and step the scores, softmaxStep and
// values in that order (a step an item does not see is an exact no-op for it: weights 0,
// correction 1), so each pair's output is the same alone (B = 1) or bundled. The next step's keys
// and values are asked for a step ahead (a cache block sits in pages of its own).
template <int B>
void attendBundle(const AttentionArgs &args, const AttentionItem (&items)[B],
                  const Scratch (&s)[B]) {
  const int32_t headDim = args.headDim;
  LaneSoftmax state[B];
  int32_t lo = INT_MAX, hi = 0;
  const float *queries[B];
  float *weights[B], *acc[B];
  for (int b = 0; b < B; ++b) {
    const int32_t pairs = items[b].tokens * items[b].heads;
    int32_t itemLo, itemHi;
    state[b] = startSoftmax(args, items[b], pairs, itemLo, itemHi);
    lo = std::min(lo, itemLo);
    hi = std::max(hi, itemHi);
    packQueries(args, items[b], pairs, s[b]);
    std::memset(s[b].acc, 0, sizeof(float) * kLanePairs * headDim);
    queries[b] = s[b].queries;
    weights[b] = s[b].weights;
    acc[b] = s[b].acc;
  }
  const ItemCache cache = itemCache(args, items[0]);
  for (int32_t start = lo / kLanePositions * kLanePositions; start < hi; start += kLanePositions) {
    if (start + kLanePositions < hi)
      cache.prefetch(start + kLanePositions);
    const float *keys = cache.keys(start, s[0]), *values = cache.values(start, s[0]);
    bundleDots<B>(keys, headDim, queries, weights);
    __m512 correction[B];
    for (int b = 0; b < B; ++b)
      correction[b] = (__m512)softmaxStep(state[b], weights[b], start, args.scale);
    bundleValues<B>(values, headDim, weights, std::max(lo - start, 0),
                    std::min(hi - start, kLanePositions), correction, acc);
  }
  for (int b = 0; b < B; ++b)
    storePairs(args, items[b], items[b].tokens * items[b].heads, state[b].sum, s[b]);
}

// A run of up to kBundleItems lane items' tokens of one sequence and kv head (as
// attentionF32LanesAvx512 cuts them): its items of more than kFewPairs pairs run as one bundle,
// the others (the run's last, short one) alone.
void attendRun(const AttentionArgs &args, const AttentionItem &run, int32_t itemTokens,
               const Scratch (&s)[kBundleItems]) {
  AttentionItem bundle[kBundleItems];
  int32_t count = 0;
  for (int32_t t = 0; t < run.tokens; t += itemTokens) {
    AttentionItem item = run;
    item.token0 = run.token0 + t;
    item.tokens = std::min(itemTokens, run.tokens - t);
    const int32_t pairs = item.tokens * item.heads;
    if (pairs > kFewPairs)
      bundle[count++] = item;
    else
      kFewPairsFns[pairs - 1](args, item, s[0]);
  }
  if (count == 3)
    attendBundle<3>(args, {bundle[0], bundle[1], bundle[2]}, s);
  else if (count == 2)
    attendBundle<2>(args, {bundle[0], bundle[1]}, {s[0], s[1]});
  else if (count == 1)
    attendBundle<1>(args, {bundle[0]}, {s[0]});
}

} // namespace

// Items as laneItems makes them, run kBundleItems consecutive ones of a sequence and kv head at a
// time (attendRun; a worker's scratch holds one Scratch per item of a run).
void attentionF32LanesAvx512(const AttentionArgs &args) {
  const int32_t heads = std::min(args.numHeads / args.numKvHeads, kLanePairs);
  const int32_t itemTokens = std::max(1, kLanePairs / heads);
  thread_local std::vector<AttentionItem> callerRuns;
  std::vector<AttentionItem> &runs = callerRuns; // the name, not the thread_local, for workers
  attentionItems(args, kBundleItems * itemTokens, heads, runs);
  DynamicRanges chunks(static_cast<int64_t>(runs.size()), 1);
  parallelRun(runs.size() > 1, [&](int, int) {
    const int64_t floats = scratchFloats(args.headDim);
    float *raw = threadScratch(size_t(kBundleItems * floats));
    const Scratch s[kBundleItems] = {scratchOf(raw, args.headDim),
                                     scratchOf(raw + floats, args.headDim),
                                     scratchOf(raw + 2 * floats, args.headDim)};
    for (IndexRange chunk; chunks.next(chunk);)
      for (int64_t i = chunk.begin; i < chunk.end; ++i)
        attendRun(args, runs[static_cast<size_t>(i)], itemTokens, s);
  });
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
