// Linear: out = x W^T (+ b); x, W and out each fp32/fp16/bf16, fp32 accumulation.
//
// Every output element is accumulated in exactly the same order whatever the row count, the tile
// it falls in or the micro-kernel shape: lane l of a 4-wide accumulator sums the products with
// k = l (mod 4) in increasing k, and the four lanes are added in a fixed tree at the end. So a
// row's result is bit-identical whether it is computed alone or inside a large batch, which the
// engine's batch invariance relies on. Explicit lanes (GNU vector types) make that order part of
// the code instead of a choice the auto-vectoriser may make differently per loop.
//
// Half activations are widened to fp32 a tile at a time (rows x k-chunk, once per tile and reused
// by all its outputs) and then run through the very same fp32 micro-kernels, so a half row gives
// exactly the sums its fp32 values would; the result is rounded once when stored.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {

using V4 = F32x4;

// Rows x outputs handled by one task; the weight tile (kOutTile rows x kKBlock) stays in L1 while
// it is reused by every row of the row tile.
constexpr int32_t kRowTile = 64;
constexpr int32_t kOutTile = 16;
constexpr int32_t kKBlock = 256; // a multiple of 4 so lanes line up across blocks
// Up to this many rows a tile streams whole weight rows instead of blocking over k.
constexpr int32_t kStreamingRows = 8;
// Half x with few rows: k is cut into chunks this long (a multiple of 4), each widened once.
constexpr int32_t kStreamChunk = 1024;
constexpr int32_t kXTileFloats = kRowTile * kKBlock;
constexpr int32_t kXStreamFloats = kStreamingRows * kStreamChunk;
constexpr int32_t kXBufferFloats = std::max(kXTileFloats, kXStreamFloats);

using AccTile = V4[kRowTile][kOutTile];

inline V4 load4(const float *p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Padding lanes are +0, so the products they add leave every lane sum unchanged.
inline V4 loadPartial(const float *p, int32_t n) {
  V4 v = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int32_t i = 0; i < n; ++i)
    v[i] = p[i];
  return v;
}

// Weight sources: four consecutive weights of row o from column i, as fp32 lanes.
struct F32Source {
  const float *w;
  int64_t stride;
  V4 load(int o, int32_t i) const { return load4(w + o * stride + i); }
  V4 loadTail(int o, int32_t i, int32_t n) const { return loadPartial(w + o * stride + i, n); }
};

template <F32x4 (*Widen)(const uint16_t *)> struct HalfSource {
  const uint16_t *w;
  int64_t stride;
  V4 load(int o, int32_t i) const { return Widen(w + o * stride + i); }
  V4 loadTail(int o, int32_t i, int32_t n) const {
    uint16_t padded[4] = {0, 0, 0, 0};
    std::memcpy(padded, w + o * stride + i, n * sizeof(uint16_t));
    return Widen(padded);
  }
};
using F16Source = HalfSource<f16x4ToF32>;
using BF16Source = HalfSource<bf16x4ToF32>;

// acc[r0 + r][o0 + o] += lanes of x[r, 0..n) * w[o, 0..n) for R rows and O outputs.
template <int R, int O, class Source>
inline void dotTile(const float *x, int64_t xStride, const Source &w, int32_t n, AccTile &acc,
                    int32_t r0, int32_t o0) {
  V4 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      a[r][o] = acc[r0 + r][o0 + o];
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    V4 wv[O];
    for (int o = 0; o < O; ++o)
      wv[o] = w.load(o, i);
    for (int r = 0; r < R; ++r) {
      const V4 xv = load4(x + r * xStride + i);
      for (int o = 0; o < O; ++o)
        a[r][o] += xv * wv[o];
    }
  }
  if (i < n) {
    V4 wv[O];
    for (int o = 0; o < O; ++o)
      wv[o] = w.loadTail(o, i, n - i);
    for (int r = 0; r < R; ++r) {
      const V4 xv = loadPartial(x + r * xStride + i, n - i);
      for (int o = 0; o < O; ++o)
        a[r][o] += xv * wv[o];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      acc[r0 + r][o0 + o] = a[r][o];
}

template <int O, class Source>
void dotRows(const float *x, int64_t xStride, const Source &w, int32_t n, int32_t rows,
             AccTile &acc, int32_t o0) {
  int32_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dotTile<4, O>(x + r * xStride, xStride, w, n, acc, r, o0);
  switch (rows - r) {
  case 3:
    dotTile<3, O>(x + r * xStride, xStride, w, n, acc, r, o0);
    break;
  case 2:
    dotTile<2, O>(x + r * xStride, xStride, w, n, acc, r, o0);
    break;
  case 1:
    dotTile<1, O>(x + r * xStride, xStride, w, n, acc, r, o0);
    break;
  default:
    break;
  }
}

// Runs outputs [oBegin, oEnd) of the tile; `w` starts at weight row oBegin.
template <class Source>
void dotOutputs(const float *x, int64_t xStride, Source w, int32_t n, int32_t rows, AccTile &acc,
                int32_t oBegin, int32_t oEnd) {
  int32_t o = oBegin;
  // One or two rows (decode) leave too few independent accumulator chains at two outputs: the
  // adds' latency, not memory, bounds them. Four outputs give four to eight chains.
  if (rows <= 2)
    for (; o + 4 <= oEnd; o += 4, w.w += 4 * w.stride)
      dotRows<4>(x, xStride, w, n, rows, acc, o);
  for (; o + 2 <= oEnd; o += 2, w.w += 2 * w.stride)
    dotRows<2>(x, xStride, w, n, rows, acc, o);
  if (o < oEnd)
    dotRows<1>(x, xStride, w, n, rows, acc, o);
}

struct Tile {
  int32_t row0, rows, out0, outs;
};

// fp32 x of the tile's rows over k in [k0, k0 + n): row r at x + r * stride.
struct XBlock {
  const float *x;
  int64_t stride;
};

// Accumulates outputs [oBegin, oEnd) of the tile over k in [k0, k0 + n). Half weights are either
// widened as they are loaded (`widenInPlace`, when few rows use them) or widened once into
// `weightBuffer` (kOutTile x kKBlock) and reused by every row of the tile.
void accumulateBlock(const LinearArgs &args, const Tile &tile, XBlock xb, int32_t oBegin,
                     int32_t oEnd, int32_t k0, int32_t n, bool widenInPlace, AccTile &acc,
                     float *weightBuffer) {
  const int64_t in = args.inFeatures;
  const float *x = xb.x;
  const int64_t xStride = xb.stride;
  const int64_t first = (tile.out0 + oBegin) * in + k0;
  if (args.weightType == WeightType::kF32) {
    const F32Source w{static_cast<const float *>(args.weight) + first, in};
    dotOutputs(x, xStride, w, n, tile.rows, acc, oBegin, oEnd);
  } else if (widenInPlace) {
    const auto *halves = static_cast<const uint16_t *>(args.weight) + first;
    if (args.weightType == WeightType::kBF16)
      dotOutputs(x, xStride, BF16Source{halves, in}, n, tile.rows, acc, oBegin, oEnd);
    else
      dotOutputs(x, xStride, F16Source{halves, in}, n, tile.rows, acc, oBegin, oEnd);
  } else {
    for (int32_t o = oBegin; o < oEnd; ++o)
      weightRunToF32(args.weight, args.weightType, (tile.out0 + o) * in + k0, n,
                     weightBuffer + (o - oBegin) * kKBlock);
    dotOutputs(x, xStride, F32Source{weightBuffer, kKBlock}, n, tile.rows, acc, oBegin, oEnd);
  }
}

// The tile's x over k in [k0, k0 + n): fp32 x in place, half x widened into `xBuffer`.
XBlock xBlockOf(const LinearArgs &args, const Tile &tile, int32_t k0, int32_t n, float *xBuffer) {
  const int64_t in = args.inFeatures;
  if (args.xType == ElemType::kF32)
    return {static_cast<const float *>(args.x) + tile.row0 * in + k0, in};
  for (int32_t r = 0; r < tile.rows; ++r)
    loadRun(args.x, args.xType, (tile.row0 + r) * in + k0, n, xBuffer + r * int64_t(n));
  return {xBuffer, n};
}

// Few rows: the weights are the traffic. Read two (one or two rows: four) weight rows start to
// end so the hardware prefetcher sees long sequential streams; x (a few rows) stays in cache
// anyway. Half x is widened kStreamChunk columns at a time, which still leaves long weight runs.
void streamTile(const LinearArgs &args, const Tile &tile, AccTile &acc, float *weightBuffer,
                float *xBuffer) {
  const int32_t in = args.inFeatures;
  const int32_t chunk = args.xType == ElemType::kF32 ? std::max(in, 1) : kStreamChunk;
  for (int32_t k0 = 0; k0 < in; k0 += chunk) {
    const int32_t n = std::min(chunk, in - k0);
    const XBlock xb = xBlockOf(args, tile, k0, n, xBuffer);
    const int32_t group = tile.rows <= 2 ? 4 : 2; // weight rows streamed side by side
    for (int32_t o = 0; o < tile.outs; o += group)
      accumulateBlock(args, tile, xb, o, std::min(o + group, tile.outs), k0, n, true, acc,
                      weightBuffer);
  }
}

// Sums the lanes (fixed tree), adds the bias and stores each output once in outType.
void storeTile(const LinearArgs &args, const Tile &tile, const AccTile &acc) {
  const int64_t outStride = args.outFeatures;
  float sums[kOutTile];
  for (int32_t r = 0; r < tile.rows; ++r) {
    for (int32_t o = 0; o < tile.outs; ++o) {
      const V4 a = acc[r][o];
      float sum = (a[0] + a[1]) + (a[2] + a[3]);
      if (args.bias)
        sum += args.bias[tile.out0 + o];
      sums[o] = sum;
    }
    storeRun(sums, tile.outs, args.out, args.outType, (tile.row0 + r) * outStride + tile.out0);
  }
}

void linearTile(const LinearArgs &args, const Tile &tile, AccTile &acc, float *weightBuffer,
                float *xBuffer) {
  const int32_t in = args.inFeatures;
  for (int32_t r = 0; r < tile.rows; ++r)
    for (int32_t o = 0; o < tile.outs; ++o)
      acc[r][o] = V4{0.0f, 0.0f, 0.0f, 0.0f};
  if (tile.rows <= kStreamingRows) {
    streamTile(args, tile, acc, weightBuffer, xBuffer);
  } else {
    for (int32_t k0 = 0; k0 < in; k0 += kKBlock) {
      const int32_t n = std::min(kKBlock, in - k0);
      const XBlock xb = xBlockOf(args, tile, k0, n, xBuffer);
      accumulateBlock(args, tile, xb, 0, tile.outs, k0, n, false, acc, weightBuffer);
    }
  }
  storeTile(args, tile, acc);
}

} // namespace

void linear(const LinearArgs &args) {
  const int32_t rowTiles = (args.rows + kRowTile - 1) / kRowTile;
  const int32_t outTiles = (args.outFeatures + kOutTile - 1) / kOutTile;
  const int64_t tasks = static_cast<int64_t>(rowTiles) * outTiles;
  const int64_t work = static_cast<int64_t>(args.rows) * args.inFeatures * args.outFeatures;
#pragma omp parallel if (work > 65536)
  {
    alignas(64) AccTile acc;
    alignas(64) float weightBuffer[kOutTile * kKBlock];
    float *xBuffer = args.xType == ElemType::kF32 ? nullptr : threadScratch(kXBufferFloats);
    // Row tiles innermost, so a thread's consecutive tasks read the same weight rows (from L2
    // after the first); decode has one row tile and so splits purely over outputs.
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int32_t outTile = static_cast<int32_t>(task / rowTiles);
      const int32_t rowTile = static_cast<int32_t>(task % rowTiles);
      Tile tile;
      tile.row0 = rowTile * kRowTile;
      tile.rows = std::min(kRowTile, args.rows - tile.row0);
      tile.out0 = outTile * kOutTile;
      tile.outs = std::min(kOutTile, args.outFeatures - tile.out0);
      linearTile(args, tile, acc, weightBuffer, xBuffer);
    }
  }
}

} // namespace kiln::kernels::cpu
