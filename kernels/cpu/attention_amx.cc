// Attention on AMX tiles (CpuIsa::kAmx) for bf16 queries and a bf16 KV cache: the same paged,
// causal (optionally windowed), grouped-query attention as attention.cc, with both products on
// the tiles and the softmax on 16 lanes.
//
// A work item is up to 16 (token, head) pairs of one sequence sharing a kv head: the tiles' 16
// rows. Per 16 cache positions (a cache block holds a whole number of them):
//   S^T = K Q^T: A is 16 key rows straight from the cache (32 dimensions a tile), B the item's
//     queries in the tiles' pair layout (packed once per item), C 16 positions x 16 pairs;
//   online softmax down C's rows, each lane one pair: scale and mask (positions a pair does not
//     see are -inf), the running max, e^x on 16 lanes (exp_lanes.inc), the running sum in
//     position order;
//   O += P V: P's fp32 weights split exactly into three bf16 parts (hi + mid + lo: 8 significant
//     bits each, the 24 of an fp32), so no weight is rounded: two A tiles, [hi | mid] and [lo | 0]
//     over 32 slots, against one B tile holding the 16 positions' values in the pair layout twice
//     (rows of two positions interleaved; positions no pair of the item sees are zero); four C
//     tiles of 16 dimensions, added to the fp32 accumulators after rescaling them by
//     e^(old max - new max). The products are exact, so this is fp32 attention up to summation
//     order: kiln's rule that an op computes in fp32 and rounds its output once holds.
// Each element of a tile product is its own dot product, so a pair's scores and its share of P V
// do not depend on the other rows of the tile; its positions are folded 16 aligned positions at a
// time in increasing order, and positions before its first or after its last visible one are
// exact no-ops (weights 0, rescale by 1). So a pair's output is bit-identical whichever item,
// batch or chunk of a prompt it is computed in, decode included.
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

#include "kernels/cpu/exp_lanes.inc"

#include "kernels/cpu/attention_lanes.inc"

#include "kernels/cpu/amx_tiles.inc"

constexpr int32_t kPairs = kLanePairs;         // a tile's rows, a vector's lanes
constexpr int32_t kPositions = kLanePositions; // cache positions per step
constexpr int32_t kDimBlock = 32;              // dimensions of one S^T tile product
constexpr int32_t kOutDims = 64;               // dimensions of one P V pass: four C tiles of 16
constexpr int32_t kTileFloats = 256;

// A worker's buffers, 64-byte aligned: the queries as B tiles, one C tile of scores, P as two A
// tiles, four B tiles of values, four C tiles of P V, the accumulators.
struct Scratch {
  uint32_t *queries; // headDim / 32 tiles
  float *scores;
  uint32_t *weights;
  uint32_t *values;
  float *products;
  float *acc; // [kPairs][headDim]
};

int64_t scratchFloats(int32_t headDim) {
  return 16 + int64_t(headDim) * kPairs / 2 + kTileFloats * (3 + 4 + 4) + int64_t(kPairs) * headDim;
}

Scratch scratchOf(float *raw, int32_t headDim) {
  float *p = raw + ((64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64) / sizeof(float);
  Scratch s;
  s.queries = reinterpret_cast<uint32_t *>(p);
  p += int64_t(headDim) * kPairs / 2;
  s.scores = p;
  s.weights = reinterpret_cast<uint32_t *>(p + kTileFloats);
  s.values = reinterpret_cast<uint32_t *>(p + 3 * kTileFloats);
  s.products = p + 7 * kTileFloats;
  s.acc = p + 11 * kTileFloats;
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
  for (int32_t n = 0; n < kPairs; ++n) {
    const int64_t offset =
        (item.token0 + n / item.heads) * rowStride + (item.head0 + n % item.heads) * headDim;
    for (int32_t b = 0; b < headDim / kDimBlock; ++b) {
      const __m512i run =
          n < pairs ? _mm512_loadu_si512(q + offset + b * kDimBlock) : _mm512_setzero_si512();
      _mm512_i32scatter_epi32(dst + b * kTileFloats + n, column, run, 4);
    }
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

// P (16 positions x 16 pairs, fp32) as two A tiles: row n of the first holds pair n's weights'
// high parts for the 16 positions in order, then their middle parts; of the second, their low
// parts, then zeros. hi = p's top 8 significant bits, mid the next 8 of p - hi, lo = p - hi - mid,
// the last 8 at most (both subtractions exact): hi + mid + lo == p (the tiles read a subnormal
// part as 0: below 2^-126). P is transposed in registers (transpose16, attention_lanes.inc), not
// scattered lane by lane.
void packWeights(const float *weights, uint32_t *dst) {
  __m512 rows[kPositions];
  for (int32_t j = 0; j < kPositions; ++j)
    rows[j] = _mm512_load_ps(weights + j * kPairs);
  transpose16(rows); // rows[n]: pair n's weights for the 16 positions
  for (int32_t n = 0; n < kPairs; ++n) {
    F32x16 p = (F32x16)rows[n];
    const F32x16 hi = bf16PartOf(p);
    p = p - hi;
    const F32x16 mid = bf16PartOf(p);
    const F32x16 lo = bf16PartOf(p - mid);
    _mm512_store_si512(dst + n * 16, highHalvesOf(hi, mid));
    _mm512_store_si512(dst + kTileFloats + n * 16, highHalvesOf(lo, F32x16{}));
  }
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

// products (tiles of 16 pairs x 16 dimensions) = P V over `tiles` (2 or 4) value tiles, P as its
// two A tiles (packWeights).
void multiplyValues(const uint32_t *weights, const uint32_t *values, int32_t tiles,
                    float *products) {
  KILN_TILE_LOAD(4, weights, 64);
  KILN_TILE_LOAD(5, weights + kTileFloats, 64);
  KILN_TILE_ZERO(0);
  KILN_TILE_ZERO(1);
  KILN_TILE_LOAD(6, values, 64);
  KILN_TILE_DPBF16PS(0, 4, 6);
  KILN_TILE_DPBF16PS(0, 5, 6);
  KILN_TILE_LOAD(7, values + kTileFloats, 64);
  KILN_TILE_DPBF16PS(1, 4, 7);
  KILN_TILE_DPBF16PS(1, 5, 7);
  KILN_TILE_STORE(0, products, 64);
  KILN_TILE_STORE(1, products + kTileFloats, 64);
  if (tiles < 4)
    return;
  KILN_TILE_ZERO(2);
  KILN_TILE_ZERO(3);
  KILN_TILE_LOAD(6, values + 2 * kTileFloats, 64);
  KILN_TILE_DPBF16PS(2, 4, 6);
  KILN_TILE_DPBF16PS(2, 5, 6);
  KILN_TILE_LOAD(7, values + 3 * kTileFloats, 64);
  KILN_TILE_DPBF16PS(3, 4, 7);
  KILN_TILE_DPBF16PS(3, 5, 7);
  KILN_TILE_STORE(2, products + 2 * kTileFloats, 64);
  KILN_TILE_STORE(3, products + 3 * kTileFloats, 64);
}

// scores (16 positions x 16 pairs) = K Q^T for the 16 key rows at `keys`.
void multiplyKeys(const uint16_t *keys, int32_t headDim, const uint32_t *queries, float *scores) {
  KILN_TILE_ZERO(0);
  for (int32_t b = 0; b < headDim / kDimBlock; ++b) {
    KILN_TILE_LOAD(4, keys + b * kDimBlock, int64_t(headDim) * 2);
    KILN_TILE_LOAD(6, queries + b * kTileFloats, 64);
    KILN_TILE_DPBF16PS(0, 4, 6);
  }
  KILN_TILE_STORE(0, scores, 64);
}

void attendItem(const AttentionArgs &args, const AttentionItem &item, const Scratch &s) {
  const int32_t headDim = args.headDim;
  const int32_t pairs = item.tokens * item.heads;
  int32_t lo, hi;
  LaneSoftmax state = startSoftmax(args, item, pairs, lo, hi);
  packQueries(args, item, pairs, s.queries);
  std::memset(s.weights, 0, 2 * kTileFloats * sizeof(uint32_t));
  std::memset(s.values, 0, 4 * kTileFloats * sizeof(uint32_t));
  std::memset(s.acc, 0, sizeof(float) * kPairs * headDim);
  const int32_t kvHead = item.head0 / (args.numHeads / args.numKvHeads);
  const int32_t *blockTable = args.blockTables + int64_t(item.seq) * args.maxBlocksPerSeq;
  const int64_t blockStride = int64_t(args.numKvHeads) * args.blockSize * headDim;
  const int64_t headOffset = int64_t(kvHead) * args.blockSize * headDim;
  const auto *kCache = static_cast<const uint16_t *>(args.kCache);
  const auto *vCache = static_cast<const uint16_t *>(args.vCache);
  for (int32_t start = lo / kPositions * kPositions; start < hi; start += kPositions) {
    const int32_t block = start / args.blockSize;
    const int64_t at = blockTable[block] * blockStride + headOffset +
                       int64_t(start - block * args.blockSize) * headDim;
    multiplyKeys(kCache + at, headDim, s.queries, s.scores);
    const F32x16 correction = softmaxStep(state, s.scores, start, args.scale);
    packWeights(s.scores, s.weights);
    for (int32_t d0 = 0; d0 < headDim; d0 += kOutDims) {
      const int32_t dims = std::min(kOutDims, headDim - d0);
      packValues(vCache + at, headDim, d0, dims, lo - start, hi - start, s.values);
      multiplyValues(s.weights, s.values, dims / 16, s.products);
      for (int32_t n = 0; n < kPairs; ++n) {
        float *acc = s.acc + int64_t(n) * headDim + d0;
        const F32x16 c = F32x16{} + correction[n];
        for (int32_t g = 0; g < dims / 16; ++g)
          storeF32x16(acc + 16 * g, loadF32x16(acc + 16 * g) * c +
                                        loadF32x16(s.products + g * kTileFloats + n * 16));
      }
    }
  }
  const int64_t rowStride = int64_t(args.numHeads) * headDim;
  for (int32_t n = 0; n < pairs; ++n) {
    float *acc = s.acc + int64_t(n) * headDim;
    for (int32_t d = 0; d < headDim; ++d)
      acc[d] = acc[d] / state.sum[n];
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
    for (IndexRange chunk; chunks.next(chunk);)
      for (int64_t i = chunk.begin; i < chunk.end; ++i)
        attendItem(args, items[static_cast<size_t>(i)], s);
    endTiles();
  });
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
