// Linear with quantized weights: out = x W^T (+ b), W in the layout of
// runtime/base/quant_layout.h (Q8, Q4, Q4M, Q4Z, Q8F, Q8F32), x fp32/fp16/bf16, fp32
// accumulation.
//
// From avx512 up, and at avx2 where the CPU has F16C, on weights packed into panels when the op is
// prepared (linear_quant.h "Panels"; linearQuantPanels below, linear_quant_panels_avx512.cc,
// linear_quant_panels_avx2.cc: two 8-lane registers a panel): a panel's 16 outputs are the lanes,
// and each group's sum of x times the stored integers is scaled once (Q4M: plus the min times the
// group's sum of x; Q4Z: plus -zero * scale times it). The tasks are a row tile x a run of at most
// kMaxTaskPanels panels, the runs cut in a multiple of the workers, and a worker takes one run (all
// its row tiles) at a time, whichever worker is free next.
//
// Otherwise (sse2, avx2 without F16C, and avx2 and avx512 on weights nobody packed: the avx2
// code) each weight is
// dequantized inside the dot product to its exact fp32 value (Q8 scale * q, Q8F scale * e and Q4
// scale * (u - 8) are exact in fp32; Q4M scale * u is exact, so scale * u + min is rounded once;
// Q4Z scale * u - zero * scale is exact), never into a copy of the matrix. The tasks are kRowTile
// rows x kOutTile outputs (linear_quant.h). Summation order:
//   portable (sse2): the weight row is dequantized into the worker's scratch; 16 lanes, lane l
//     sums x * w at k = l (mod 16) in increasing k, a multiply then an add; the lanes are added
//     in a pairwise tree.
//   avx2 (linear_quant_avx2.cc): the same lanes, one fused multiply-add per product, the lanes
//     added l + 8 first.
// With KILN_CPU_ACTIVATIONS=int8 (activation_mode.h), Linears with Q8 / Q4 / Q4M / Q4Z weights
// quantize x rows to int8 first, once per worker and row tile (Int8Cache below), and multiply
// integers (linear_quant_int8.h: AMX-INT8 tiles for whole groups of 16 rows at amx on CPUs with
// AMX-INT8, the VNNI panels from avx512 up on CPUs with AVX512-VNNI, the avx2 panels from avx2
// with F16C up, else its portable rows), the same bits at every level.
// Every order is fixed per level and path, so a row's result is the same alone or anywhere in a
// batch. Row tiles are innermost, so a worker's consecutive tasks read the same weights from
// cache; half x is widened once per worker and row tile, as linear.cc's XCache does. The bias is
// added to the sum last, and the result rounded once to outType.
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_quant_int8.h"
#include "kernels/cpu/vector4.h"
#include "kernels/cpu/weight_convert.h"
#include "kernels/cpu/worker_pool.h"
#include "runtime/base/half.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu {

using linear_quant::DotTile;
using linear_quant::DotTileFn;
using linear_quant::Int8Rows;
using linear_quant::kOutTile;
using linear_quant::kRowTile;
using linear_quant::runsInt8Activations;

QuantMatrix quantMatrixOf(const void *data, QuantWeight quant, int64_t rows, int32_t cols) {
  const int64_t matrixRows = quant.matrixRows > 0 ? quant.matrixRows : rows;
  const QuantLayout layout = quantLayout(quant.format, matrixRows, cols, quant.groupSize);
  const auto *bytes = static_cast<const uint8_t *>(data);
  QuantMatrix w;
  w.format = quant.format;
  w.groupSize = quant.groupSize;
  w.cols = cols;
  w.groupsPerRow = static_cast<int32_t>(layout.groupsPerRow);
  w.rowBytes = static_cast<int64_t>(quantValueBytes(quant.format, uint64_t(cols)));
  // A row slice: its first row's values, scales and mins.
  const int64_t firstSlot = quant.firstRow * layout.groupsPerRow;
  w.values = bytes + quant.firstRow * w.rowBytes;
  w.scales = bytes + layout.scalesOffset + firstSlot * quantScaleBytes(quant.format);
  if (hasQuantMins(quant.format))
    w.mins = reinterpret_cast<const uint16_t *>(bytes + layout.minsOffset) + firstSlot;
  return w;
}

namespace {

void dequantizeQ8Group(const uint8_t *values, float scale, int32_t n, float *dst) {
  for (int32_t k = 0; k < n; ++k)
    dst[k] = scale * static_cast<float>(static_cast<int8_t>(values[k]));
}

// Runs of 32 values in 16 bytes: byte b holds value b (low nibble) and value b + 16 (high).
void dequantizeQ4Group(const uint8_t *values, float scale, int32_t n, float *dst) {
  for (int32_t run = 0; run < n; run += kQuantSubBlock, values += 16, dst += kQuantSubBlock)
    for (int32_t b = 0; b < 16; ++b) {
      dst[b] = scale * static_cast<float>((values[b] & 0xF) - 8);
      dst[b + 16] = scale * static_cast<float>((values[b] >> 4) - 8);
    }
}

// scale * u + offset (Q4M: the min; Q4Z: -zero * scale, so the sum is exact).
void dequantizeQ4OffsetGroup(const uint8_t *values, float scale, float min, int32_t n, float *dst) {
  for (int32_t run = 0; run < n; run += kQuantSubBlock, values += 16, dst += kQuantSubBlock)
    for (int32_t b = 0; b < 16; ++b) {
      dst[b] = scale * static_cast<float>(values[b] & 0xF) + min;
      dst[b + 16] = scale * static_cast<float>(values[b] >> 4) + min;
    }
}

} // namespace

void dequantizeRow(const QuantMatrix &w, int64_t row, float *dst) {
  const uint8_t *values = w.values + row * w.rowBytes;
  const int32_t n = w.groupSize;
  for (int32_t g = 0; g < w.groupsPerRow; ++g) {
    const float scale = quantScale(w, row * w.groupsPerRow + g);
    float *groupDst = dst + int64_t(g) * n;
    switch (w.format) {
    case QuantFormat::kQ8:
      dequantizeQ8Group(values + int64_t(g) * n, scale, n, groupDst);
      break;
    case QuantFormat::kQ8Float:
    case QuantFormat::kQ8FloatF32:
      f8e4m3RunToF32(values + int64_t(g) * n, n, groupDst); // exact: 4 x 11 significant bits
      for (int32_t k = 0; k < n; ++k)
        groupDst[k] *= scale;
      break;
    case QuantFormat::kQ4:
      dequantizeQ4Group(values + int64_t(g) * n / 2, scale, n, groupDst);
      break;
    case QuantFormat::kQ4Min:
    case QuantFormat::kQ4Zero:
      dequantizeQ4OffsetGroup(values + int64_t(g) * n / 2, scale,
                              groupOffset(w, row * w.groupsPerRow + g, scale), n, groupDst);
      break;
    }
  }
}

namespace {

// The portable order (see the top of this file); n is a multiple of 32.
float dotPortable(const float *x, const float *w, int32_t n) {
  F32x4 acc[4] = {};
  for (int32_t k = 0; k < n; k += 16)
    for (int v = 0; v < 4; ++v) {
      const F32x4 product = loadF32x4(x + k + 4 * v) * loadF32x4(w + k + 4 * v);
      acc[v] += product;
    }
  const F32x4 pairs = {acc[0][0] + acc[0][1], acc[0][2] + acc[0][3], acc[1][0] + acc[1][1],
                       acc[1][2] + acc[1][3]};
  const F32x4 pairs2 = {acc[2][0] + acc[2][1], acc[2][2] + acc[2][3], acc[3][0] + acc[3][1],
                        acc[3][2] + acc[3][3]};
  const float low = (pairs[0] + pairs[1]) + (pairs[2] + pairs[3]);
  const float high = (pairs2[0] + pairs2[1]) + (pairs2[2] + pairs2[3]);
  return low + high;
}

// Each weight row of the tile is dequantized once and read by every row of the tile.
void dotTilePortable(const QuantMatrix &w, const DotTile &tile, float *sums, float *weightRow) {
  // One row of `weights` at a time: each is read by every row of the tile before the next.
  for (int32_t o = 0; o < tile.outs; ++o) {
    dequantizeRow(w, tile.out0 + o, weightRow);
    for (int32_t r = 0; r < tile.rows; ++r)
      sums[r * kOutTile + o] = dotPortable(tile.x + r * tile.xStride, weightRow, w.cols);
  }
}

DotTileFn dotTileFor(CpuIsa isa) {
  return isa >= CpuIsa::kAvx2 ? linear_quant::dotTileAvx2 : dotTilePortable;
}

// Half x widened to fp32, kept by a worker for one call: row tile t is converted the first time
// the worker runs one of its tasks. `rows` null: x is read in place (fp32), or is too large to
// keep and each task converts its rows into `tileRows`.
struct XRows {
  float *rows = nullptr;     // every row of the call, inFeatures floats apart
  float *tileRows = nullptr; // one row tile's
  uint64_t converted = 0;    // bit t: row tile t is in `rows`
};
constexpr int64_t kMaxCachedXFloats = int64_t(1) << 20; // 4 MiB per worker
constexpr int32_t kMaxCachedRowTiles = 64;

// Whether a worker keeps every row of the call: not too many row tiles for the bit mask, nor
// floats.
bool keepsAllRows(const LinearArgs &args) {
  const int32_t rowTiles = (args.rows + kRowTile - 1) / kRowTile;
  return rowTiles <= kMaxCachedRowTiles &&
         int64_t(args.rows) * args.inFeatures <= kMaxCachedXFloats;
}
// Whether a worker keeps the call's int8 rows (Int8Cache below); then widened x is needed only once
// per row tile, to quantize it, and is not kept.
bool cachesInt8(const LinearArgs &args) {
  return runsInt8Activations(args.quant.format) && keepsAllRows(args);
}
bool cachesX(const LinearArgs &args) {
  return args.xType != ElemType::kF32 && keepsAllRows(args) && !cachesInt8(args);
}

// Floats of a worker's widened x: every row of the call, one row tile's, or none (fp32 x).
size_t xFloats(const LinearArgs &args) {
  if (cachesX(args))
    return size_t(args.rows) * args.inFeatures;
  return args.xType != ElemType::kF32 ? size_t(kRowTile) * args.inFeatures : 0;
}

// Points x's buffers at `scratch`, where the worker's widened x goes.
XRows xRowsAt(const LinearArgs &args, float *scratch) {
  XRows x;
  (cachesX(args) ? x.rows : x.tileRows) = scratch;
  return x;
}

// The tile's x rows [row0, row0 + rows) as fp32.
const float *xRowsOf(const LinearArgs &args, int32_t row0, int32_t rows, XRows &x) {
  const int64_t in = args.inFeatures;
  if (args.xType == ElemType::kF32)
    return static_cast<const float *>(args.x) + row0 * in;
  float *dst = x.tileRows;
  if (x.rows) {
    dst = x.rows + row0 * in;
    const uint64_t bit = uint64_t(1) << (row0 / kRowTile);
    if (x.converted & bit)
      return dst;
    x.converted |= bit;
  }
  loadRun(args.x, args.xType, row0 * in, rows * in, dst);
  return dst;
}

// Adds the bias and stores each output once in outType.
void storeSums(const LinearArgs &args, const DotTile &tile, int32_t row0, float *sums) {
  for (int32_t r = 0; r < tile.rows; ++r) {
    float *rowSums = sums + r * kOutTile;
    if (args.bias)
      for (int32_t o = 0; o < tile.outs; ++o)
        rowSums[o] += args.bias[tile.out0 + o];
    storeRun(rowSums, tile.outs, args.out, args.outType,
             int64_t(row0 + r) * args.outFeatures + tile.out0);
  }
}

// The panel functions of a level that runs panels.
struct PanelFns {
  void (*tile)(const linear_quant::PanelTile &);
  void (*groupSums)(const float *, int32_t, int32_t, float *);
};
PanelFns panelFnsFor(CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512)
    return {linear_quant::panelTileAvx512, linear_quant::groupSumsAvx512};
  return {linear_quant::panelTileAvx2, linear_quant::groupSumsAvx2};
}

// Whether the active level runs packed panels: from avx512 up, and at avx2 with F16C (the panels'
// fp16 scales).
bool levelRunsPanels() {
  const CpuIsa isa = activeCpuIsa();
  return isa >= CpuIsa::kAvx512 || (isa == CpuIsa::kAvx2 && cpuHasF16c());
}

// A worker's int8 rows (linear_quant_int8.h) for one call: every row, quantized the first time
// the worker runs a task of its row tile (as XRows keeps widened x), where cachesInt8; else one
// row tile's, quantized for each task. A panel task reads a row tile once per run of panels, so
// keeping them saves a quantization per run after the first.
struct Int8Cache {
  linear_quant::Int8Rows rows;
  bool all = false;
  uint64_t quantized = 0; // bit t: row tile t is in `rows`
};

// Rows the worker's scratch holds int8 rows for, and how many floats they take there.
int64_t int8CachedRows(const LinearArgs &args) {
  return cachesInt8(args) ? args.rows : kRowTile;
}
size_t int8RowsFloats(const LinearArgs &args) {
  const size_t values = size_t(int8CachedRows(args)) * args.inFeatures;
  const size_t blocks = values / linear_quant::kInt8Block;
  return (values + 1) / 2 + (values + 3) / 4 + 2 * blocks;
}
Int8Cache int8CacheAt(const LinearArgs &args, float *scratch) {
  const size_t values = size_t(int8CachedRows(args)) * args.inFeatures;
  Int8Cache cache;
  cache.all = cachesInt8(args);
  linear_quant::Int8Rows &rows = cache.rows;
  rows.scales = scratch;
  rows.sums = reinterpret_cast<int32_t *>(scratch + values / linear_quant::kInt8Block);
  rows.q = reinterpret_cast<int16_t *>(scratch + 2 * (values / linear_quant::kInt8Block));
  rows.bytes = reinterpret_cast<int8_t *>(rows.q + values);
  rows.cols = args.inFeatures;
  return cache;
}
void quantizeRows(const float *x, int64_t xStride, int32_t rows,
                  const linear_quant::Int8Rows &out) {
  if (activeCpuIsa() >= CpuIsa::kAvx2 && cpuHasF16c()) // the file's target: AVX2 + FMA + F16C
    linear_quant::quantizeRowsAvx2(x, xStride, rows, out);
  else
    linear_quant::quantizeRowsPortable(x, xStride, rows, out);
}

// The row tile [row0, row0 + rows) of x as int8 rows, quantized unless the worker kept them.
linear_quant::Int8Rows int8RowsOf(const LinearArgs &args, int32_t row0, int32_t rows, XRows &x,
                                  Int8Cache &cache) {
  if (!cache.all) {
    quantizeRows(xRowsOf(args, row0, rows, x), args.inFeatures, rows, cache.rows);
    return cache.rows;
  }
  const int64_t blocks = int64_t(row0) * (args.inFeatures / linear_quant::kInt8Block);
  linear_quant::Int8Rows tile = cache.rows;
  tile.q += int64_t(row0) * args.inFeatures;
  tile.bytes += int64_t(row0) * args.inFeatures;
  tile.scales += blocks;
  tile.sums += blocks;
  const uint64_t bit = uint64_t(1) << (row0 / kRowTile);
  if (!(cache.quantized & bit)) {
    cache.quantized |= bit;
    quantizeRows(xRowsOf(args, row0, rows, x), args.inFeatures, rows, tile);
  }
  return tile;
}

// Adds the bias to a panel task's sums and stores each output once in outType.
void storePanelSums(const LinearArgs &args, float *sums, int32_t rows, int32_t row0, int32_t p0,
                    int32_t p1) {
  const int32_t out0 = p0 * linear_quant::kPanelOutputs;
  const int32_t outs = std::min(p1 * linear_quant::kPanelOutputs, args.outFeatures) - out0;
  for (int32_t r = 0; r < rows; ++r) {
    float *rowSums = sums + r * linear_quant::kPanelSumStride;
    if (args.bias)
      for (int32_t o = 0; o < outs; ++o)
        rowSums[o] += args.bias[out0 + o];
    storeRun(rowSums, outs, args.out, args.outType, int64_t(row0 + r) * args.outFeatures + out0);
  }
}

// Panels [p0, p1) of the packed weights against rows [row0, row0 + rows) of x, stored: on fp32
// rows (tile.x), or on `int8` (not null) quantized from them.
// `panelsAsBefore`: the worker's previous task had the same panels.
void runPanelTask(const LinearArgs &args, const PanelFns &fns, linear_quant::PanelTile tile,
                  int32_t row0, int32_t p0, int32_t p1, float *xSums,
                  const linear_quant::Int8Rows *int8, bool panelsAsBefore) {
  tile.panels = static_cast<const uint8_t *>(args.packedWeight) + p0 * tile.layout.panelBytes;
  tile.panelCount = p1 - p0;
  if (int8) {
    const linear_quant::Int8PanelTile int8Tile{tile.panels,    tile.layout,     tile.format,
                                               tile.groupSize, tile.panelCount, *int8,
                                               tile.rows,      tile.sums,       panelsAsBefore};
    if (linear_quant::int8PanelsRunAmx())
      linear_quant::panelTileInt8Amx(int8Tile);
    else if (linear_quant::int8PanelsRunVnni())
      linear_quant::panelTileInt8Vnni(int8Tile);
    else
      linear_quant::panelTileInt8Avx2(int8Tile);
    return storePanelSums(args, tile.sums, tile.rows, row0, p0, p1);
  }
  if (hasQuantMins(tile.format))
    for (int32_t r = 0; r < tile.rows; ++r)
      fns.groupSums(tile.x + r * tile.xStride, tile.groupSize, tile.layout.groups,
                    xSums + int64_t(r) * tile.layout.groups);
  fns.tile(tile);
  storePanelSums(args, tile.sums, tile.rows, row0, p0, p1);
}

// The packed panels (linear_quant.h), where levelRunsPanels.
void linearQuantPanels(const LinearArgs &args) {
  using namespace linear_quant;
  const PanelFns fns = panelFnsFor(activeCpuIsa());
  const PanelLayout layout = panelLayout(args.quant, args.outFeatures, args.inFeatures);
  // Runs of at most kMaxTaskPanels panels, as many for each worker (their sizes differ by one).
  const int threads = cpuThreads();
  const int32_t runs =
      threads * ((layout.panels + kMaxTaskPanels * threads - 1) / (kMaxTaskPanels * threads));
  const int32_t rowTiles = (args.rows + kRowTile - 1) / kRowTile;
  const int64_t tasks = int64_t(rowTiles) * runs;
  const int64_t work = int64_t(args.rows) * args.inFeatures * args.outFeatures;
  const size_t sumFloats = size_t(kRowTile) * kPanelSumStride;
  const size_t xSumFloats = hasQuantMins(args.quant.format) ? size_t(kRowTile) * layout.groups : 0;
  const bool int8 = runsInt8Activations(args.quant.format);
  const size_t int8Floats = int8 ? int8RowsFloats(args) : 0;
  // A worker takes one run (all its row tiles) at a time, whichever worker is free next, so a
  // worker slowed by others on its core does not hold the Linear back by its whole static share (as
  // linear_panels_impl.inc's runTasks).
  DynamicRanges runsOfRowTiles(tasks, rowTiles);
  parallelRun(work > 65536, [&](int, int) {
    float *sums = threadScratch(sumFloats + xSumFloats + int8Floats + xFloats(args));
    float *xSums = sums + sumFloats;
    Int8Cache int8Cache = int8CacheAt(args, xSums + xSumFloats);
    XRows x = xRowsAt(args, xSums + xSumFloats + int8Floats);
    PanelTile tile{nullptr, layout,  args.quant.format, args.quant.groupSize,
                   0,       nullptr, args.inFeatures,   0,
                   xSums,   sums};
    int32_t lastRun = -1;
    auto runTask = [&](int64_t task) {
      const int32_t row0 = static_cast<int32_t>(task % rowTiles) * kRowTile;
      const int32_t run = static_cast<int32_t>(task / rowTiles);
      const bool panelsAsBefore = run == lastRun;
      lastRun = run;
      tile.rows = std::min(kRowTile, args.rows - row0);
      Int8Rows int8Rows;
      if (int8)
        int8Rows = int8RowsOf(args, row0, tile.rows, x, int8Cache);
      else
        tile.x = xRowsOf(args, row0, tile.rows, x);
      runPanelTask(args, fns, tile, row0, int32_t(int64_t(run) * layout.panels / runs),
                   int32_t(int64_t(run + 1) * layout.panels / runs), xSums,
                   int8 ? &int8Rows : nullptr, panelsAsBefore);
    };
    for (IndexRange range; runsOfRowTiles.next(range);)
      for (int64_t task = range.begin; task < range.end; ++task)
        runTask(task);
  });
}

} // namespace

namespace linear_quant {

PanelLayout panelLayout(QuantWeight quant, int32_t outFeatures, int32_t inFeatures) {
  PanelLayout layout;
  layout.panels = (outFeatures + kPanelOutputs - 1) / kPanelOutputs;
  layout.groups = inFeatures / quant.groupSize;
  layout.valueBytes = int64_t(quant.groupSize) * (isByteQuant(quant.format) ? 16 : 8);
  layout.groupBytes = layout.valueBytes + kPanelOutputs * int64_t(quantScaleBytes(quant.format)) +
                      (hasQuantMins(quant.format) ? 32 : 0);
  layout.panelBytes = layout.groups * layout.groupBytes;
  layout.totalBytes = size_t(layout.panels) * size_t(layout.panelBytes);
  return layout;
}

void packPanels(const QuantMatrix &w, int32_t outFeatures, void *packed) {
  const PanelLayout layout = panelLayout({w.format, w.groupSize}, outFeatures, w.cols);
  auto *dst = static_cast<uint8_t *>(packed);
  std::memset(dst, 0, layout.totalBytes);
  const int64_t groupValueBytes = int64_t(quantValueBytes(w.format, uint64_t(w.groupSize)));
  for (int32_t row = 0; row < outFeatures; ++row) {
    const int32_t o = row % kPanelOutputs;
    uint8_t *panel = dst + (row / kPanelOutputs) * layout.panelBytes;
    for (int32_t g = 0; g < layout.groups; ++g) {
      uint8_t *block = panel + g * layout.groupBytes;
      const uint8_t *src = w.values + row * w.rowBytes + g * groupValueBytes;
      // Q8: byte k of the group to [k][o]; Q4: byte 16 * run + b to [run][b][o], the same walk.
      for (int64_t i = 0; i < groupValueBytes; ++i)
        block[i * kPanelOutputs + o] = src[i];
      const int64_t slot = int64_t(row) * w.groupsPerRow + g;
      const uint64_t scaleBytes = quantScaleBytes(w.format);
      std::memcpy(block + layout.valueBytes + scaleBytes * o,
                  static_cast<const uint8_t *>(w.scales) + scaleBytes * slot, scaleBytes);
      if (w.mins)
        std::memcpy(block + layout.valueBytes + 32 + 2 * o, w.mins + slot, 2);
    }
  }
}

} // namespace linear_quant

namespace {

void linearQuantRows(const LinearArgs &args) {
  const QuantMatrix w = quantMatrixOf(args.weight, args.quant, args.outFeatures, args.inFeatures);
  const DotTileFn dotTile = dotTileFor(activeCpuIsa());
  const int32_t rowTiles = (args.rows + kRowTile - 1) / kRowTile;
  const int32_t outTiles = (args.outFeatures + kOutTile - 1) / kOutTile;
  const int64_t tasks = int64_t(rowTiles) * outTiles;
  const int64_t work = int64_t(args.rows) * args.inFeatures * args.outFeatures;
  const size_t headFloats = kRowTile * kOutTile + size_t(kOutTile) * args.inFeatures;
  const bool int8 = runsInt8Activations(args.quant.format);
  const size_t int8Floats = int8 ? int8RowsFloats(args) : 0;
  parallelRun(work > 65536, [&](int worker, int workers) {
    float *sums = threadScratch(headFloats + int8Floats + xFloats(args));
    float *weights = sums + kRowTile * kOutTile;
    Int8Cache int8Cache = int8CacheAt(args, sums + headFloats);
    XRows x = xRowsAt(args, sums + headFloats + int8Floats);
    const IndexRange range = staticRange(tasks, worker, workers);
    for (int64_t task = range.begin; task < range.end; ++task) {
      const int32_t row0 = static_cast<int32_t>(task % rowTiles) * kRowTile;
      const int32_t out0 = static_cast<int32_t>(task / rowTiles) * kOutTile;
      DotTile tile;
      tile.rows = std::min(kRowTile, args.rows - row0);
      tile.xStride = args.inFeatures;
      tile.out0 = out0;
      tile.outs = std::min(kOutTile, args.outFeatures - out0);
      if (int8) {
        const Int8Rows int8Rows = int8RowsOf(args, row0, tile.rows, x, int8Cache);
        linear_quant::dotTileInt8Portable(w, int8Rows, tile.rows, tile.out0, tile.outs, sums,
                                          reinterpret_cast<int16_t *>(weights));
      } else {
        tile.x = xRowsOf(args, row0, tile.rows, x);
        dotTile(w, tile, sums, weights);
      }
      storeSums(args, tile, row0, sums);
    }
  });
}

} // namespace

void linearQuant(const LinearArgs &args) {
  if (args.packedWeight && levelRunsPanels())
    return linearQuantPanels(args);
  linearQuantRows(args);
}

size_t quantPackedWeightBytes(QuantWeight quant, int32_t outFeatures, int32_t inFeatures) {
  if (!levelRunsPanels())
    return 0;
  return linear_quant::panelLayout(quant, outFeatures, inFeatures).totalBytes;
}

void packQuantWeights(const void *weight, QuantWeight quant, int32_t outFeatures,
                      int32_t inFeatures, void *packed) {
  linear_quant::packPanels(quantMatrixOf(weight, quant, outFeatures, inFeatures), outFeatures,
                           packed);
}

} // namespace kiln::kernels::cpu
