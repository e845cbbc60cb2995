// Attention on AMX tiles (CpuIsa::kAmx) for bf16 queries and a bf16 KV cache: the same paged,
// causal (optionally windowed), grouped-query attention as attention.cc, with both products on
// the tiles and the softmax on 16 lanes.
//
// A work item is up to 16 (token, head) pairs of one sequence sharing a kv head: the tiles' 16
// rows. Per 16 cache positions (a cache block holds a whole number of them):
//   S^T = K Q^T: A is 16 key rows straight from the cache (32 dimensions a tile), B the item's
//     queries in the tiles' pair layout (packed once per item), C 16 positions x 16 pairs;
//     the next 16 positions' product is started before this step's softmax, so the tiles work
//     while the lanes do;
//   online softmax down C's rows, each lane one pair (weighScores): mask (positions a pair does
//     not see are -inf; skipped where every pair sees all 16), a running max that moves only when
//     a score passes it by more than kSlack (so rescaling is rare), e^(scale s - scale max) as one
//     fused multiply-add and a 16-lane e^x with fused multiply-adds (expWeights), the running sum
//     in position order;
//   O += P V: P's fp32 weights split exactly into three bf16 parts (hi + mid + lo: 8 significant
//     bits each, the 24 of an fp32), so no weight is rounded: two A tiles, [hi | mid] and [lo | 0]
//     over 32 slots, against one B tile holding the 16 positions' values in the pair layout twice
//     (rows of two positions interleaved; positions no pair of the item sees are zero), into C
//     tiles of 16 dimensions that are the accumulators themselves: up to 64 dimensions they stay
//     in tiles 0-3 for the whole item (stored, rescaled and reloaded only when a max moves), wider
//     heads load and store them per pass of 64. The products are exact, so this is fp32 attention
//     up to summation order: kiln's rule that an op computes in fp32 and rounds its output once
//     holds.
// A step's keys and values are asked for into L2 kFarSteps ahead and into L1 kAheadSteps ahead
// (prefetchAhead; past an item's end, the first steps of the item its worker takes next): a cache
// block's rows sit in pages of their own, where the hardware prefetchers do not follow.
// Each element of a tile product is its own dot product, so a pair's scores and its share of P V
// do not depend on the other rows of the tile; its positions are folded 16 aligned positions at a
// time in increasing order, and positions before its first or after its last visible one are
// exact no-ops (weights 0, rescale by 1); whether its max moves depends on its own scores only
// (the other lanes of a rescale are multiplied by exactly 1). So a pair's output is bit-identical
// whichever item, batch or chunk of a prompt it is computed in, decode included.
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_items.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <vector>

KILN_TARGET_BEGIN(KILN_ISA_AMX)

namespace kiln::kernels::cpu {
namespace {

#include "kernels/cpu/attention_lanes.inc"

#include "kernels/cpu/transpose16_avx512.inc"

#include "kernels/cpu/amx_tiles.inc"

constexpr int32_t kPairs = kLanePairs;         // a tile's rows, a vector's lanes
constexpr int32_t kPositions = kLanePositions; // cache positions per step
constexpr int32_t kDimBlock = 32;              // dimensions of one S^T tile product
constexpr int32_t kOutDims = 64;               // dimensions of one P V pass: four C tiles of 16
constexpr int32_t kTileFloats = 256;
constexpr float kSlack = 8.0f; // how far the softmax's running max may lag its scores
// Steps between asking for a step's keys and values and their use: into L2 kFarSteps ahead, then
// into L1 kAheadSteps ahead (two levels measured faster than either alone: more misses in flight).
constexpr int32_t kAheadSteps = 2;
constexpr int32_t kFarSteps = 4;

// A worker's buffers, 64-byte aligned: the queries as B tiles, two C tiles of scores (this step's
// and the next's), P as two A tiles, four B tiles of values, the accumulators.
struct Scratch {
  uint32_t *queries; // headDim / 32 tiles
  float *scores[2];
  uint32_t *weights;
  uint32_t *values;
  float *acc; // [kPairs][headDim]
};

int64_t scratchFloats(int32_t headDim) {
  return 16 + int64_t(headDim) * kPairs / 2 + kTileFloats * (2 + 2 + 4) + int64_t(kPairs) * headDim;
}

Scratch scratchOf(float *raw, int32_t headDim) {
  float *p = raw + ((64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64) / sizeof(float);
  Scratch s;
  s.queries = reinterpret_cast<uint32_t *>(p);
  p += int64_t(headDim) * kPairs / 2;
  s.scores[0] = p;
  s.scores[1] = p + kTileFloats;
  p += kTileFloats;
  s.weights = reinterpret_cast<uint32_t *>(p + kTileFloats);
  s.values = reinterpret_cast<uint32_t *>(p + 3 * kTileFloats);
  s.acc = p + 7 * kTileFloats;
  return s;
}

// The item's queries as B tiles: tile b, row p, word n holds pair n's dimensions (32b + 2p,
// 32b + 2p + 1); pairs past `pairs` are zero.
void packQueries(const AttentionArgs &args, const AttentionItem &item, int32_t pairs,
                 uint32_t *dst) {
  const int32_t headDim = args.headDim;
  const int64_t rowStride = int64_t(args.numHeads) * headDim;
  const auto *q = static_cast<const uint16_t *>(args.q);
  const __m512i column = (__m512i)columnIndex();
  if (pairs < kPairs)
    std::memset(dst, 0, sizeof(uint32_t) * headDim / kDimBlock * kTileFloats);
  for (int32_t n = 0; n < pairs; ++n) {
    const int64_t offset =
        (item.token0 + n / item.heads) * rowStride + (item.head0 + n % item.heads) * headDim;
    for (int32_t b = 0; b < headDim / kDimBlock; ++b)
      _mm512_i32scatter_epi32(dst + b * kTileFloats + n, column,
                              _mm512_loadu_si512(q + offset + b * kDimBlock), 4);
  }
}

// x's leading 8 significant bits (its top 16 bits: a bf16), as an fp32.
F32x16 bf16PartOf(F32x16 x) {
  return (F32x16)((U32x16)x & 0xffff0000u);
}

// The high 16 bits of each 32-bit lane of a, then of b, as the 32 16-bit elements of one vector:
// for bf16 values held as fp32, word t holds lanes 2t and 2t + 1 as the tiles' pairs.
__m512i highHalvesOf(F32x16 a, F32x16 b) {
  alignas(64) static constexpr uint16_t kOdd[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                    23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                    45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16((__m512i)a, _mm512_load_si512(kOdd), (__m512i)b);
}

#include "kernels/cpu/exp_fma_lanes.inc"

// e^x for the softmax's arguments: at most kSlack, or -inf (masked positions), or NaN; below
// kExpFmaMin it is 0, as expFmaLanes gives. (The tiles' sums already make this level's bits its
// own: the tests' tolerance, tests/kernels/cpu/half_kernels_test.cc.)
F32x16 expWeights(F32x16 x) {
  const __m512 v = (__m512)x;
  const __mmask16 tiny = _mm512_cmp_ps_mask(v, _mm512_set1_ps(kExpFmaMin), _CMP_LT_OQ);
  return (F32x16)_mm512_maskz_mov_ps(~tiny, expFmaInRange(v));
}

// One step's scores (16 positions from `position0` x 16 pairs, raw q.k) to P's two A tiles, the
// pairs' running max (in raw units: the scale is positive) and sum updated; returns the factor the
// accumulators are rescaled by (1 where a pair has seen nothing before). Positions a pair does not
// see are -inf whatever their score (NaN included), unless `inside`: every pair of the item sees
// all
// 16. The weights e^(scale s - scale max) are one fused multiply-add and expWeights each, kept in
// registers, transposed there (transpose16, attention_lanes.inc: row n = pair n's 16 weights) and
// split exactly into three bf16 parts: hi = p's top 8 significant bits, mid the next 8 of p - hi,
// lo = p - hi - mid, the last 8 at most (both subtractions exact), so hi + mid + lo == p (the
// tiles read a subnormal part as 0: below 2^-126). Row n of the first A tile holds pair n's high
// parts for the 16 positions in order, then their middle parts; of the second, their low parts,
// then zeros. Only the item's `pairs` rows are written: the others' weights are 0, which the
// rows already hold (attendItem zeroes the tiles' buffer once per item).
F32x16 weighScores(LaneSoftmax &state, const float *scores, int32_t position0, float scale,
                   bool inside, int32_t pairs, uint32_t *dst) {
  const F32x16 minusInf = F32x16{} - std::numeric_limits<float>::infinity();
  __m512 rows[kPositions];
  F32x16 rowMax = minusInf;
  for (int32_t j = 0; j < kPositions; ++j) {
    F32x16 s = loadF32x16(scores + j * kPairs);
    if (!inside) {
      const I32x16 position = I32x16{} + (position0 + j);
      s = ((position >= state.first) & (position < state.length)) ? s : minusInf;
    }
    rows[j] = (__m512)s;
    rowMax = rowMax > s ? rowMax : s;
  }
  // The max moves only when a score passes it by more than kSlack / scale, so the accumulators are
  // rarely rescaled (each weight stays below e^kSlack).
  const F32x16 newMax = rowMax > state.max + kSlack / scale ? rowMax : state.max;
  const auto live = newMax > minusInf; // lanes that have seen a position
  // 1 until a pair has seen a position (its accumulators and sum are 0 until then).
  const F32x16 correction =
      state.max > minusInf ? expWeights((state.max - newMax) * scale) : F32x16{} + 1.0f;
  const __m512 shift = (__m512)(newMax * scale), factor = _mm512_set1_ps(scale);
  F32x16 sum = state.sum * correction;
  for (int32_t j = 0; j < kPositions; ++j) {
    const F32x16 w = live ? expWeights((F32x16)_mm512_fmsub_ps(rows[j], factor, shift)) : F32x16{};
    sum = sum + w;
    rows[j] = (__m512)w;
  }
  state.sum = sum;
  state.max = newMax;
  transpose16(rows);
  for (int32_t n = 0; n < pairs; ++n) {
    F32x16 p = (F32x16)rows[n];
    const F32x16 hi = bf16PartOf(p);
    p = p - hi;
    const F32x16 mid = bf16PartOf(p);
    const F32x16 lo = bf16PartOf(p - mid);
    _mm512_store_si512(dst + n * 16, highHalvesOf(hi, mid));
    _mm512_store_si512(dst + kTileFloats + n * 16, highHalvesOf(lo, F32x16{}));
  }
  return correction;
}

// Dimensions [d0, d0 + dims) (32 or 64) of the 16 positions' values (rows headDim apart, from
// `values`) as B tiles of 16 dimensions: row p of tile g holds (v[2p][d], v[2p + 1][d]) for its 16
// dimensions, and row p + 8 the same (for the weights' [hi | mid] tile); positions outside
// [valid0, valid1) (relative to the 16) are zero.
void packValues(const uint16_t *values, int32_t headDim, int32_t d0, int32_t dims, int32_t valid0,
                int32_t valid1, uint32_t *dst) {
  alignas(64) static constexpr uint16_t kLow[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                    37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                     53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                     27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i low = _mm512_load_si512(kLow), high = _mm512_load_si512(kHigh);
  for (int32_t p = 0; p < kPositions / 2; ++p) {
    const int32_t a = 2 * p, b = 2 * p + 1;
    for (int32_t h = 0; h < dims / 32; ++h) {
      const int32_t d = d0 + 32 * h;
      const __m512i va = a >= valid0 && a < valid1
                             ? _mm512_loadu_si512(values + int64_t(a) * headDim + d)
                             : _mm512_setzero_si512();
      const __m512i vb = b >= valid0 && b < valid1
                             ? _mm512_loadu_si512(values + int64_t(b) * headDim + d)
                             : _mm512_setzero_si512();
      const __m512i first = _mm512_permutex2var_epi16(va, low, vb);
      const __m512i second = _mm512_permutex2var_epi16(va, high, vb);
      uint32_t *tile = dst + (2 * h) * kTileFloats;
      _mm512_storeu_si512(tile + p * 16, first);
      _mm512_storeu_si512(tile + (p + 8) * 16, first);
      _mm512_storeu_si512(tile + kTileFloats + p * 16, second);
      _mm512_storeu_si512(tile + kTileFloats + (p + 8) * 16, second);
    }
  }
}

// C tiles 0.. += P V over `tiles` (2 or 4) value tiles of 16 dimensions, P as its two A tiles
// (weighScores).
void accumulateValues(const uint32_t *weights, const uint32_t *values, int32_t tiles) {
  KILN_TILE_LOAD(4, weights, 64);
  KILN_TILE_LOAD(5, weights + kTileFloats, 64);
  KILN_TILE_LOAD(6, values, 64);
  KILN_TILE_LOAD(7, values + kTileFloats, 64);
  KILN_TILE_DPBF16PS(0, 4, 6);
  KILN_TILE_DPBF16PS(1, 4, 7);
  KILN_TILE_DPBF16PS(0, 5, 6);
  KILN_TILE_DPBF16PS(1, 5, 7);
  if (tiles < 4)
    return;
  KILN_TILE_LOAD(6, values + 2 * kTileFloats, 64);
  KILN_TILE_LOAD(7, values + 3 * kTileFloats, 64);
  KILN_TILE_DPBF16PS(2, 4, 6);
  KILN_TILE_DPBF16PS(3, 4, 7);
  KILN_TILE_DPBF16PS(2, 5, 6);
  KILN_TILE_DPBF16PS(3, 5, 7);
}

// C tiles 0.. (16 pairs x 16 dimensions each, `tiles` of them) to or from rows `stride` floats
// apart, tile g at dst + 16 g.
void storeAccumulators(int32_t tiles, float *dst, int64_t stride) {
  const int64_t bytes = stride * int64_t(sizeof(float));
  KILN_TILE_STORE(0, dst, bytes);
  KILN_TILE_STORE(1, dst + 16, bytes);
  if (tiles < 4)
    return;
  KILN_TILE_STORE(2, dst + 32, bytes);
  KILN_TILE_STORE(3, dst + 48, bytes);
}
void loadAccumulators(int32_t tiles, const float *src, int64_t stride) {
  const int64_t bytes = stride * int64_t(sizeof(float));
  KILN_TILE_LOAD(0, src, bytes);
  KILN_TILE_LOAD(1, src + 16, bytes);
  if (tiles < 4)
    return;
  KILN_TILE_LOAD(2, src + 32, bytes);
  KILN_TILE_LOAD(3, src + 48, bytes);
}
void zeroAccumulators(int32_t tiles) {
  KILN_TILE_ZERO(0);
  KILN_TILE_ZERO(1);
  if (tiles < 4)
    return;
  KILN_TILE_ZERO(2);
  KILN_TILE_ZERO(3);
}
// scores (16 positions x 16 pairs) = K Q^T for the 16 key rows at `keys`.
// C is tile 7, so that the accumulators (tiles 0-3) stay.
void multiplyKeys(const uint16_t *keys, int32_t headDim, const uint32_t *queries, float *scores) {
  KILN_TILE_ZERO(7);
  for (int32_t b = 0; b < headDim / kDimBlock; ++b) {
    KILN_TILE_LOAD(4, keys + b * kDimBlock, int64_t(headDim) * 2);
    KILN_TILE_LOAD(6, queries + b * kTileFloats, 64);
    KILN_TILE_DPBF16PS(7, 4, 6);
  }
  KILN_TILE_STORE(7, scores, 64);
}

// Pair n's accumulator row (headDim floats) times correction[n].
void rescaleRows(F32x16 correction, int32_t headDim, float *acc) {
  for (int32_t n = 0; n < kPairs; ++n) {
    float *row = acc + int64_t(n) * headDim;
    const F32x16 c = F32x16{} + correction[n];
    for (int32_t d = 0; d < headDim; d += 16)
      storeF32x16(row + d, loadF32x16(row + d) * c);
  }
}

// The steps an item folds: 16 aligned positions from start0, before end, in `cache`.
struct ItemSteps {
  CacheSteps cache;
  int32_t start0, end;
};

ItemSteps itemSteps(const AttentionArgs &args, const AttentionItem &item, int32_t lo, int32_t hi) {
  const int32_t start0 = lo / kPositions * kPositions;
  return {cacheSteps(args, item), start0,
          hi > start0 ? start0 + (hi - start0 + kPositions - 1) / kPositions * kPositions : start0};
}

// The positions item `next` will fold first: as startSoftmax's lo and hi (its tokens' positions
// increase, so its first token sees the earliest and its last the latest).
ItemSteps nextSteps(const AttentionArgs &args, const AttentionItem &next) {
  const int32_t first = args.positions[next.token0];
  const int32_t last = args.positions[next.token0 + next.tokens - 1];
  const int32_t window = args.slidingWindow;
  return itemSteps(args, next, window > 0 && first >= window ? first - window + 1 : 0, last + 1);
}

// Asks for the keys and values of the step `distance` steps after the one at `start`: the item's
// own, or past its end those of `next` (the item its worker folds next, or null).
void prefetchAhead(const ItemSteps &steps, const ItemSteps *next, int32_t start, int32_t distance,
                   bool toL2) {
  const int32_t ahead = start + distance * kPositions;
  if (ahead < steps.end)
    steps.cache.prefetch(ahead, toL2);
  else if (next != nullptr && next->start0 + (ahead - steps.end) < next->end)
    next->cache.prefetch(next->start0 + (ahead - steps.end), toL2);
}

void attendItem(const AttentionArgs &args, const AttentionItem &item, const ItemSteps *next,
                const Scratch &s) {
  const int32_t headDim = args.headDim;
  const int32_t pairs = item.tokens * item.heads;
  int32_t lo, hi;
  LaneSoftmax state = startSoftmax(args, item, pairs, lo, hi);
  const ItemSteps steps = itemSteps(args, item, lo, hi);
  // Its first steps (asked for by the worker's previous item too, unless it had none or was short).
  for (int32_t t = 0; t < kFarSteps && steps.start0 + t * kPositions < steps.end; ++t)
    steps.cache.prefetch(steps.start0 + t * kPositions, t >= kAheadSteps);
  int32_t firstMax = 0, lengthMin = INT_MAX; // positions every pair sees: [firstMax, lengthMin)
  for (int32_t n = 0; n < pairs; ++n) {
    firstMax = std::max(firstMax, state.first[n]);
    lengthMin = std::min(lengthMin, state.length[n]);
  }
  packQueries(args, item, pairs, s.queries);
  std::memset(s.weights, 0, 2 * kTileFloats * sizeof(uint32_t));
  // Up to 64 dimensions the accumulators stay in C tiles 0-3 for the whole item, else each pass of
  // 64 loads and stores them.
  const bool resident = headDim <= kOutDims;
  if (resident)
    zeroAccumulators(headDim / 16);
  else
    std::memset(s.acc, 0, sizeof(float) * kPairs * headDim);
  const auto *kCache = static_cast<const uint16_t *>(args.kCache);
  const auto *vCache = static_cast<const uint16_t *>(args.vCache);
  const CacheSteps &cache = steps.cache;
  if (steps.start0 < hi)
    multiplyKeys(kCache + cache.offset(steps.start0), headDim, s.queries, s.scores[0]);
  for (int32_t start = steps.start0, step = 0; start < hi; start += kPositions, step ^= 1) {
    prefetchAhead(steps, next, start, kFarSteps, true);
    prefetchAhead(steps, next, start, kAheadSteps, false);
    const int64_t at = cache.offset(start);
    // The next step's scores first: the tiles work on them while the lanes weigh this step's.
    if (start + kPositions < hi)
      multiplyKeys(kCache + cache.offset(start + kPositions), headDim, s.queries,
                   s.scores[step ^ 1]);
    const bool inside = start >= firstMax && start + kPositions <= lengthMin;
    const F32x16 correction =
        weighScores(state, s.scores[step], start, args.scale, inside, pairs, s.weights);
    if (_mm512_cmp_ps_mask((__m512)correction, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ)) {
      if (resident)
        storeAccumulators(headDim / 16, s.acc, headDim);
      rescaleRows(correction, headDim, s.acc);
      if (resident)
        loadAccumulators(headDim / 16, s.acc, headDim);
    }
    for (int32_t d0 = 0; d0 < headDim; d0 += kOutDims) {
      const int32_t tiles = std::min(kOutDims, headDim - d0) / 16;
      packValues(vCache + at, headDim, d0, 16 * tiles, lo - start, hi - start, s.values);
      if (!resident)
        loadAccumulators(tiles, s.acc + d0, headDim);
      accumulateValues(s.weights, s.values, tiles);
      if (!resident)
        storeAccumulators(tiles, s.acc + d0, headDim);
    }
  }
  if (resident)
    storeAccumulators(headDim / 16, s.acc, headDim);
  const int64_t rowStride = int64_t(args.numHeads) * headDim;
  for (int32_t n = 0; n < pairs; ++n) {
    float *acc = s.acc + int64_t(n) * headDim;
    const __m512 sum = _mm512_set1_ps(state.sum[n]);
    for (int32_t d = 0; d < headDim; d += 16)
      _mm512_storeu_ps(acc + d, _mm512_div_ps(_mm512_loadu_ps(acc + d), sum));
    storeRun(acc, headDim, args.out, args.type,
             (item.token0 + n / item.heads) * rowStride + (item.head0 + n % item.heads) * headDim);
  }
}

} // namespace

bool attentionRunsOnAmx(const AttentionArgs &args) {
  return args.type == ElemType::kBF16 && args.kvType == ElemType::kBF16 && args.headDim > 0 &&
         args.headDim % kDimBlock == 0 && args.blockSize % kPositions == 0;
}

void attentionAmx(const AttentionArgs &args) {
  thread_local std::vector<AttentionItem> callerItems;
  std::vector<AttentionItem> &items = callerItems;
  laneItems(args, items);
  DynamicRanges chunks(static_cast<int64_t>(items.size()), 1);
  parallelRun(items.size() > 1, [&](int, int) {
    const Scratch s = scratchOf(threadScratch(size_t(scratchFloats(args.headDim))), args.headDim);
    beginTiles();
    // A worker takes its next item before it folds the current one, so that the current one's
    // last steps can ask for the next one's first keys and values.
    IndexRange current, next;
    for (bool more = chunks.next(current); more; current = next) {
      more = chunks.next(next);
      const ItemSteps ahead = more ? nextSteps(args, items[size_t(next.begin)]) : ItemSteps{};
      attendItem(args, items[size_t(current.begin)], more ? &ahead : nullptr, s);
    }
    endTiles();
  });
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
