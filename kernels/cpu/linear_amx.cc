// Linear with bf16 weights on AMX tiles (CpuIsa::kAmx): out = x W^T (+ b), x rounded to bf16.
//
// One tile multiply (TDPBF16PS) adds A[16][32] x B[32][16] into a 16 x 16 fp32 tile C. Here A is
// 16 rows of x over 32 columns of k, rounded to bf16 and copied as one contiguous 1 KiB tile per
// (16 rows, 32 columns) (roundRows: with x's own rows as the tile rows, 2 KiB or more apart, the
// 512 x 1024 x 5632 product ran 4-7% slower), and B is 16 outputs'
// weights over the same 32 columns in the tile's pair layout: its row p holds, for each of the 16
// outputs, columns (2p, 2p + 1) as one 32-bit word. The weights are put in that layout once, when
// the op is prepared (packLinearWeights; runtime/ops/linear_op.cc), as one contiguous 1 KiB tile
// per (16 outputs, 32 columns), outputs outer: a task streams its weights front to back. A Linear
// whose weights were not packed (a caller that did not prepare it) packs each 16-output group
// as a task first needs it. C is 16 rows x 16 outputs, in out's own layout.
//
// A task is up to 64 rows x 32 outputs, run as 32-row halves of 2 x 2 tiles (two A and two B
// tiles loaded per 32 columns for four tile multiplies), or for a step of at most 16 rows, 16 rows
// x up to 64 outputs (one A tile, four B and C tiles), so decode keeps four tile multiplies in
// flight. Every row count runs the same tile multiply, and each output element is its own dot
// product, accumulated over k in 32-column blocks in increasing order: a row's result is
// bit-identical alone or in a batch. The hardware's order inside one tile multiply is not a vector
// lane's (tests/kernels/cpu/linear_test.cc states the tolerance against the double reference on
// the rounded x). Outputs are stored from C with the bias added and rounded as elem_io.h's
// storeRun rounds them (storeSixteen, storeTwoGroupsBf16).
//
// x is rounded into a zero-padded bf16 copy once per 64-row tile per worker for the whole call, in
// windows of at most kMaxXWords (sized for L2) so a long prompt's x is not all held at once; a
// worker takes one output tile of a window at a time (whichever worker is free next) and runs its
// row tiles in turn, so the tile's weights stay in L2 across the window's row tiles.
//
// Linux grants a process the tile data only on request (kernels/cpu/cpu_isa.cc asks before the
// level is chosen); each worker loads the tile configuration when it starts its share of a call and
// releases the tiles when it ends it, so an idle worker carries no tile state.
#include "kernels/cpu/linear_amx.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>

KILN_TARGET_BEGIN(KILN_ISA_AMX)

namespace kiln::kernels::cpu {
namespace {

constexpr int32_t kBlockColumns = 32; // k columns of one tile multiply: 16 bf16 pairs
constexpr int32_t kGroupRows = 16;    // x rows of one A (and C) tile
constexpr int32_t kGroupOutputs = 16; // outputs of one B (and C) tile
constexpr int32_t kTaskRows = 64;     // four A tiles
constexpr int32_t kTileBytes = 1024;  // 16 rows x 64 bytes
constexpr int32_t kTileFloats = 256;
constexpr int32_t kTileWords = 512; // bf16 of one tile
// A worker's rounded x: at most this many bf16 pairs (1 MiB) at a time, so that a window of x stays
// in the core's L2 while the worker's output tiles pass over it. At 8 MiB a 512-token prefill's
// down projection (2816 inputs) held its whole x in one window, larger than L2, and re-read it
// from memory for every output tile: 1.41 TFLOP/s against 2.04 now (kiln profile, 2 cores).
constexpr int64_t kMaxXWords = int64_t(1) << 18;

#include "kernels/cpu/amx_tiles.inc"

int32_t blocksOf(int32_t in) {
  return (in + kBlockColumns - 1) / kBlockColumns;
}
int32_t groupsOf(int32_t outFeatures) {
  return (outFeatures + kGroupOutputs - 1) / kGroupOutputs;
}
int64_t groupBytes(int32_t in) {
  return int64_t(blocksOf(in)) * kTileBytes;
}

// Columns [k0, k0 + n) (n <= 32) of one row of `type` at `base` as 32 bf16 (nearest even; zeros
// past n).
__m512i bf16RunOf(const void *base, ElemType type, int64_t offset, int32_t n) {
  const __mmask16 lo = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
  const __mmask16 hi = n >= 32 ? __mmask16(0xffff) : n <= 16 ? 0 : __mmask16((1u << (n - 16)) - 1);
  if (type == ElemType::kBF16) {
    const auto *src = static_cast<const uint16_t *>(base) + offset;
    return _mm512_maskz_loadu_epi16(__mmask32(lo) | (__mmask32(hi) << 16), src);
  }
  __m512 a, b;
  if (type == ElemType::kF32) {
    const float *src = static_cast<const float *>(base) + offset;
    a = _mm512_maskz_loadu_ps(lo, src);
    b = _mm512_maskz_loadu_ps(hi, src + 16);
  } else {
    const auto *src = static_cast<const uint16_t *>(base) + offset;
    a = _mm512_maskz_cvtph_ps(lo, _mm256_maskz_loadu_epi16(lo, src));
    b = _mm512_maskz_cvtph_ps(hi, _mm256_maskz_loadu_epi16(hi, src + 16));
  }
  return (__m512i)_mm512_cvtne2ps_pbh(b, a); // the second operand gives the low half
}

// Weight rows [out0, out0 + 16) (zeros past outFeatures) as B tiles, one per 32 columns, at dst.
void packGroup(const uint16_t *w, int32_t outFeatures, int32_t in, int32_t out0, uint8_t *dst) {
  const int32_t blocks = blocksOf(in);
  const __m512i column =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(kGroupOutputs));
  for (int32_t n = 0; n < kGroupOutputs; ++n) {
    auto *first = reinterpret_cast<uint32_t *>(dst) + n;
    const bool real = out0 + n < outFeatures;
    for (int32_t b = 0; b < blocks; ++b) {
      const int32_t k0 = b * kBlockColumns;
      const __m512i pairs = real ? bf16RunOf(w, ElemType::kBF16, int64_t(out0 + n) * in + k0,
                                             std::min(kBlockColumns, in - k0))
                                 : _mm512_setzero_si512();
      _mm512_i32scatter_epi32(first + int64_t(b) * kTileFloats, column, pairs, 4);
    }
  }
}

// x rows [row0, row0 + rows) (rows <= 64) rounded to bf16 at dst as A tiles, zero-padded to whole
// 16-row groups and 32-column blocks: group g's tile of block b at dst + (16 g stride + 512 b),
// its row r at + 32 r (`stride`: the padded row length in bf16).
void roundRows(const LinearArgs &args, int32_t row0, int32_t rows, int64_t stride, uint16_t *dst) {
  const int32_t in = args.inFeatures;
  const int32_t blocks = blocksOf(in);
  const int32_t padded = (rows + kGroupRows - 1) / kGroupRows * kGroupRows;
  for (int32_t r = 0; r < padded; ++r)
    for (int32_t b = 0; b < blocks; ++b) {
      const int32_t k0 = b * kBlockColumns;
      const __m512i run = r < rows ? bf16RunOf(args.x, args.xType, int64_t(row0 + r) * in + k0,
                                               std::min(kBlockColumns, in - k0))
                                   : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (r / kGroupRows) * kGroupRows * stride + b * kTileWords +
                              (r % kGroupRows) * kBlockColumns,
                          run);
    }
}

// C tiles (16 rows x 16 outputs each, at c, kTileFloats apart) = RG row groups of x (rounded A
// tiles, roundRows' layout) times OG output groups of packed weights (at w, `wGroupBytes` apart),
// over `blocks` blocks of 32 columns; C tile og * RG + rg holds row group rg x output group og.
// Tiles 0-3 accumulate, 4-5 hold x, 6-7 weights. 2 x 2 loads two tiles of each per block for its
// four products; 4 x 1 loads five.
template <int RG, int OG>
void multiply(const uint16_t *x, int64_t stride, const uint8_t *w, int64_t wGroupBytes,
              int32_t blocks, float *c) {
  static_assert(RG * OG <= 4 && (RG == 1 || OG == 1 || (RG == 2 && OG == 2)));
  const int64_t xRowBytes = 64; // a rounded x tile's rows are contiguous (roundRows)
  const int64_t xGroup = int64_t(kGroupRows) * stride;
  KILN_TILE_ZERO(0);
  if constexpr (RG * OG > 1)
    KILN_TILE_ZERO(1);
  if constexpr (RG * OG > 2)
    KILN_TILE_ZERO(2);
  if constexpr (RG * OG > 3)
    KILN_TILE_ZERO(3);
  for (int32_t b = 0; b < blocks; ++b) {
    const uint16_t *xb = x + b * kTileWords;
    const uint8_t *wb = w + int64_t(b) * kTileBytes;
    if constexpr (RG == 2 && OG == 2) {
      KILN_TILE_LOAD(4, xb, xRowBytes);
      KILN_TILE_LOAD(6, wb, 64);
      KILN_TILE_DPBF16PS(0, 4, 6);
      KILN_TILE_LOAD(5, xb + xGroup, xRowBytes);
      KILN_TILE_DPBF16PS(1, 5, 6);
      KILN_TILE_LOAD(7, wb + wGroupBytes, 64);
      KILN_TILE_DPBF16PS(2, 4, 7);
      KILN_TILE_DPBF16PS(3, 5, 7);
    } else if constexpr (OG == 1) { // one weight tile, RG x tiles
      KILN_TILE_LOAD(6, wb, 64);
      KILN_TILE_LOAD(4, xb, xRowBytes);
      KILN_TILE_DPBF16PS(0, 4, 6);
      if constexpr (RG > 1) {
        KILN_TILE_LOAD(5, xb + xGroup, xRowBytes);
        KILN_TILE_DPBF16PS(1, 5, 6);
      }
      if constexpr (RG > 2) {
        KILN_TILE_LOAD(4, xb + 2 * xGroup, xRowBytes);
        KILN_TILE_DPBF16PS(2, 4, 6);
      }
      if constexpr (RG > 3) {
        KILN_TILE_LOAD(5, xb + 3 * xGroup, xRowBytes);
        KILN_TILE_DPBF16PS(3, 5, 6);
      }
    } else { // one x tile, OG weight tiles
      KILN_TILE_LOAD(4, xb, xRowBytes);
      KILN_TILE_LOAD(6, wb, 64);
      KILN_TILE_DPBF16PS(0, 4, 6);
      if constexpr (OG > 1) {
        KILN_TILE_LOAD(7, wb + wGroupBytes, 64);
        KILN_TILE_DPBF16PS(1, 4, 7);
      }
      if constexpr (OG > 2) {
        KILN_TILE_LOAD(6, wb + 2 * wGroupBytes, 64);
        KILN_TILE_DPBF16PS(2, 4, 6);
      }
      if constexpr (OG > 3) {
        KILN_TILE_LOAD(7, wb + 3 * wGroupBytes, 64);
        KILN_TILE_DPBF16PS(3, 4, 7);
      }
    }
  }
  KILN_TILE_STORE(0, c, 64);
  if constexpr (RG * OG > 1)
    KILN_TILE_STORE(1, c + kTileFloats, 64);
  if constexpr (RG * OG > 2)
    KILN_TILE_STORE(2, c + 2 * kTileFloats, 64);
  if constexpr (RG * OG > 3)
    KILN_TILE_STORE(3, c + 3 * kTileFloats, 64);
}

// One task's tiles: rows [row0, row0 + rows) x output groups [group0, group0 + groups); `x` holds
// those rows rounded (`stride` apart), `w` group0's packed weights.
struct Task {
  int32_t row0, rows, group0, groups;
};

void runMultiply(const Task &t, const uint16_t *x, int64_t stride, const uint8_t *w,
                 int64_t wGroupBytes, int32_t blocks, float *c) {
  const int32_t rowGroups = (t.rows + kGroupRows - 1) / kGroupRows;
  if (rowGroups == 2 && t.groups == 2)
    return multiply<2, 2>(x, stride, w, wGroupBytes, blocks, c);
  if (t.groups > 1) {
    switch (t.groups) {
    case 2:
      return multiply<1, 2>(x, stride, w, wGroupBytes, blocks, c);
    case 3:
      return multiply<1, 3>(x, stride, w, wGroupBytes, blocks, c);
    default:
      return multiply<1, 4>(x, stride, w, wGroupBytes, blocks, c);
    }
  }
  switch (rowGroups) {
  case 1:
    return multiply<1, 1>(x, stride, w, wGroupBytes, blocks, c);
  case 2:
    return multiply<2, 1>(x, stride, w, wGroupBytes, blocks, c);
  case 3:
    return multiply<3, 1>(x, stride, w, wGroupBytes, blocks, c);
  default:
    return multiply<4, 1>(x, stride, w, wGroupBytes, blocks, c);
  }
}

// VFPCLASSPS class of subnormal inputs. VCVTNE(2)PS2BF16 rounds exactly as f32ToBf16 (nearest
// even, NaN kept quiet) for every input but subnormals, which it flushes (checked over all 2^32
// inputs): outputs holding one are stored by elem_io.h's storeRun instead.
constexpr int kSubnormal = 0x20;

// 16 outputs of one row (+ bias) stored as fp32 or bf16, rounded as storeRun rounds them.
void storeSixteen(const float *row, const float *bias, void *out, ElemType type, int64_t offset) {
  __m512 v = _mm512_loadu_ps(row);
  if (bias)
    v = _mm512_add_ps(v, _mm512_loadu_ps(bias));
  if (type == ElemType::kF32) {
    _mm512_storeu_ps(static_cast<float *>(out) + offset, v);
  } else if (_mm512_fpclass_ps_mask(v, kSubnormal)) {
    alignas(64) float sums[kGroupOutputs];
    _mm512_store_ps(sums, v);
    storeRun(sums, kGroupOutputs, out, type, offset);
  } else {
    const __m256bh halves = _mm512_cvtneps_pbh(v);
    std::memcpy(static_cast<uint16_t *>(out) + offset, &halves, sizeof(halves));
  }
}

// Row r's 16 outputs of group g in the task's C tiles (tile g * rowGroups + r / 16).
const float *outputsOf(const float *c, int32_t rowGroups, int32_t g, int32_t r) {
  return c + (g * rowGroups + r / kGroupRows) * kTileFloats + (r % kGroupRows) * kGroupOutputs;
}

// bf16 outputs of two whole adjacent groups: a row's 32 values converted by one instruction and
// stored as one 64-byte run (a row holding a subnormal: storeSixteen for each group).
void storeTwoGroupsBf16(const LinearArgs &args, const Task &t, const float *c) {
  const int32_t rowGroups = (t.rows + kGroupRows - 1) / kGroupRows;
  const int32_t out0 = t.group0 * kGroupOutputs;
  const float *bias = args.bias ? args.bias + out0 : nullptr;
  auto *out = static_cast<uint16_t *>(args.out);
  for (int32_t r = 0; r < t.rows; ++r) {
    __m512 lo = _mm512_loadu_ps(outputsOf(c, rowGroups, 0, r));
    __m512 hi = _mm512_loadu_ps(outputsOf(c, rowGroups, 1, r));
    if (bias) {
      lo = _mm512_add_ps(lo, _mm512_loadu_ps(bias));
      hi = _mm512_add_ps(hi, _mm512_loadu_ps(bias + kGroupOutputs));
    }
    const int64_t offset = int64_t(t.row0 + r) * args.outFeatures + out0;
    if (_mm512_fpclass_ps_mask(lo, kSubnormal) | _mm512_fpclass_ps_mask(hi, kSubnormal)) {
      storeSixteen(outputsOf(c, rowGroups, 0, r), bias, args.out, args.outType, offset);
      storeSixteen(outputsOf(c, rowGroups, 1, r), bias ? bias + kGroupOutputs : nullptr, args.out,
                   args.outType, offset + kGroupOutputs);
      continue;
    }
    _mm512_storeu_si512(out + offset, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// Adds the bias and stores the task's outputs from its C tiles (tile og * rowGroups + rg).
void storeTask(const LinearArgs &args, const Task &t, const float *c) {
  if (t.groups == 2 && args.outType == ElemType::kBF16 &&
      (t.group0 + 2) * kGroupOutputs <= args.outFeatures)
    return storeTwoGroupsBf16(args, t, c);
  const int32_t rowGroups = (t.rows + kGroupRows - 1) / kGroupRows;
  float sums[kGroupOutputs];
  for (int32_t g = 0; g < t.groups; ++g) {
    const int32_t out0 = (t.group0 + g) * kGroupOutputs;
    const int32_t outs = std::min(kGroupOutputs, args.outFeatures - out0);
    const float *bias = args.bias ? args.bias + out0 : nullptr;
    const bool whole = outs == kGroupOutputs && args.outType != ElemType::kF16;
    for (int32_t r = 0; r < t.rows; ++r) {
      const float *row = outputsOf(c, rowGroups, g, r);
      const int64_t offset = int64_t(t.row0 + r) * args.outFeatures + out0;
      if (whole) {
        storeSixteen(row, bias, args.out, args.outType, offset);
        continue;
      }
      for (int32_t o = 0; o < outs; ++o) {
        sums[o] = row[o];
        if (bias)
          sums[o] += bias[o];
      }
      storeRun(sums, outs, args.out, args.outType, offset);
    }
  }
}

} // namespace

size_t packedAmxWeightBytes(int32_t outFeatures, int32_t inFeatures) {
  return static_cast<size_t>(groupsOf(outFeatures)) * static_cast<size_t>(groupBytes(inFeatures));
}

void packAmxWeights(const uint16_t *weight, int32_t outFeatures, int32_t inFeatures, void *packed) {
  const int32_t groups = groupsOf(outFeatures);
  const int64_t bytes = groupBytes(inFeatures);
  parallelFor(int64_t(groups) * inFeatures > 65536, groups, [&](int64_t g) {
    packGroup(weight, outFeatures, inFeatures, static_cast<int32_t>(g) * kGroupOutputs,
              static_cast<uint8_t *>(packed) + g * bytes);
  });
}

void linearAmx(const LinearArgs &args) {
  const int32_t in = args.inFeatures;
  const int32_t blocks = blocksOf(in);
  const int64_t stride = int64_t(blocks) * kBlockColumns; // of the rounded x, in bf16
  const int64_t wGroupBytes = groupBytes(in);
  const int32_t rowTiles = (args.rows + kTaskRows - 1) / kTaskRows;
  const int32_t groups = groupsOf(args.outFeatures);
  const auto *packed = static_cast<const uint8_t *>(args.packedWeight);
  // A step of at most 16 rows runs up to 4 output groups per task (weights not packed ahead: one,
  // packed as the task needs it).
  // More rows: two output groups per task, run as 32-row halves of 2 x 2 tiles.
  const int32_t groupsPerTask = !packed ? 1 : args.rows <= kGroupRows ? 4 : 2;
  const int32_t outTiles = (groups + groupsPerTask - 1) / groupsPerTask;
  const int64_t tileWords = int64_t(kTaskRows) * stride / 2;
  // Row tiles per window of rounded x; tasks run window by window, outputs outer and row tiles
  // inner within one.
  const int32_t windowTiles = static_cast<int32_t>(
      std::clamp<int64_t>(kMaxXWords / tileWords, 1, std::clamp(rowTiles, 1, 64)));
  const int64_t work = int64_t(args.rows) * in * args.outFeatures;
  // A worker takes one output tile of one window (all its row tiles) at a time, whichever worker is
  // free next (as linear_panels_impl.inc's runTasks), so a worker slowed by others on its core does
  // not hold the Linear back by its whole static share. Within a unit the row tiles run in turn,
  // and a worker's units come in increasing order, so its windows of rounded x only move forward.
  const int32_t windows = (rowTiles + windowTiles - 1) / windowTiles;
  DynamicRanges units(int64_t(windows) * outTiles, 1);
  parallelRun(work > 65536, [&](int, int) {
    // C tiles, a packed weight group when the weights are not packed, then the window's x
    // (64-byte aligned).
    const int64_t ownGroup = packed ? 0 : wGroupBytes;
    const size_t floats =
        16 + 4 * kTileFloats + size_t(ownGroup / 4) + size_t(windowTiles * tileWords);
    float *scratch = threadScratch(floats);
    float *c = scratch + ((64 - reinterpret_cast<uintptr_t>(scratch) % 64) % 64) / sizeof(float);
    auto *ownWeights = reinterpret_cast<uint8_t *>(c + 4 * kTileFloats);
    auto *xWindow = reinterpret_cast<uint16_t *>(ownWeights + ownGroup);
    int32_t roundedWindow = -1, ownGroupIndex = -1;
    uint64_t roundedTiles = 0; // bit t: row tile t of the window is rounded (windowTiles <= 64)
    beginTiles();
    // Task `task` of the window-major order: its window, output tile and slot in the window.
    auto runTaskAt = [&](int64_t task) {
      const int64_t windowTasks = int64_t(windowTiles) * outTiles;
      const int32_t window = static_cast<int32_t>(task / windowTasks);
      const int32_t firstTile = window * windowTiles;
      const int32_t tilesHere = std::min(windowTiles, rowTiles - firstTile);
      const int64_t inWindow = task - window * windowTasks;
      const int32_t outTile = static_cast<int32_t>(inWindow / tilesHere);
      const int32_t slot = static_cast<int32_t>(inWindow % tilesHere);
      if (window != roundedWindow) {
        roundedWindow = window;
        roundedTiles = 0;
      }
      Task t;
      t.row0 = (firstTile + slot) * kTaskRows;
      t.rows = std::min(kTaskRows, args.rows - t.row0);
      t.group0 = outTile * groupsPerTask;
      t.groups = std::min(groupsPerTask, groups - t.group0);
      uint16_t *x = xWindow + slot * tileWords * 2;
      if (!(roundedTiles & (uint64_t(1) << slot))) {
        roundRows(args, t.row0, t.rows, stride, x);
        roundedTiles |= uint64_t(1) << slot;
      }
      const uint8_t *w = packed ? packed + t.group0 * wGroupBytes : ownWeights;
      if (!packed && ownGroupIndex != t.group0) {
        packGroup(static_cast<const uint16_t *>(args.weight), args.outFeatures, in,
                  t.group0 * kGroupOutputs, ownWeights);
        ownGroupIndex = t.group0;
      }
      if (t.rows <= kGroupRows || t.groups == 1) {
        runMultiply(t, x, stride, w, wGroupBytes, blocks, c);
        storeTask(args, t, c);
        return;
      }
      for (int32_t half = 0; half < t.rows; half += 2 * kGroupRows) {
        Task h = t;
        h.row0 = t.row0 + half;
        h.rows = std::min(2 * kGroupRows, t.rows - half);
        runMultiply(h, x + half * stride, stride, w, wGroupBytes, blocks, c);
        storeTask(args, h, c);
      }
    };
    for (IndexRange unit; units.next(unit);) {
      const int32_t window = static_cast<int32_t>(unit.begin / outTiles);
      const int32_t tilesHere = std::min(windowTiles, rowTiles - window * windowTiles);
      const int64_t first =
          int64_t(window) * windowTiles * outTiles + (unit.begin % outTiles) * tilesHere;
      for (int32_t slot = 0; slot < tilesHere; ++slot)
        runTaskAt(first + slot);
    }
    endTiles();
  });
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
