// Linear with fp32 weights in 32-output panels on AVX-512 (CpuIsa::kAvx512 and above):
// out = x W^T (+ b).
//
// The weights are put, once when the op is prepared (packLinearWeights; runtime/ops/linear_op.cc),
// into panels of 32 outputs, each panel k-major: column k of the panel is the 32 outputs' weights
// at k, two vectors, contiguous (zeros past outFeatures). A micro-kernel of many rows holds 6 rows
// x 64 outputs (two panels) in 24 vector accumulators and, per column k, loads the 4 vectors of
// weights once and multiplies them by each row's x[k] broadcast: 24 fused multiply-adds for 10
// loads, no horizontal sums (linear_impl.inc's tiles give each output its own 16-lane vector and
// add the lanes at the end: 12 multiply-adds for 7 loads, and a vector per output to keep).
//
// Summation order, the same for every row count: k is cut into blocks of kBlockColumns columns;
// within a block each output is one chain of fused multiply-adds in increasing k from zero, and
// the blocks' sums are added into the output's total in increasing order; the bias is added last.
// Blocks are short so the chains are: a row's rounding error stays near the 16-lane tiles' (with
// 128-column blocks TinyStories-656K's logits at --tp 2 moved by 1.4e-5 from --tp 1's).
// A row's result is so bit-identical alone or in a batch, in a task of one panel or two, and
// whether the weights were packed ahead or a block at a time by the task (weights not prepared:
// tests, tools).
//
// A task is up to kTaskRows rows x two panels, run as micro-kernels of 6 rows x 4 vectors block by
// block, so the block of both panels (64 columns x 64 outputs, 16 KiB) stays in L1 while every
// row group of the task reads it; a worker runs its tasks outputs outer, rows inner, so the panels
// stay in L2. A call of at most kTaskRows rows (decode, batches) runs tasks of one panel, by
// micro-kernels of up to 12 rows x 2 vectors: each task then streams one contiguous run of
// weights, and a 576-output Linear gives 18 tasks to share among the workers, not 9.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_panels.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <utility>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu {
namespace {

constexpr int32_t kPanel = 32;        // outputs of one panel: 2 vectors of 16 lanes
constexpr int32_t kTaskOutputs = 64;  // outputs of a task of many rows: 2 panels
constexpr int32_t kBlockColumns = 64; // k columns of one block
constexpr int32_t kTaskRows = 96;     // rows of one task

constexpr int64_t kPrefetchBytes = 8192; // how far ahead a one-panel task fetches its weights

int32_t panelsOf(int32_t outFeatures) {
  return (outFeatures + kPanel - 1) / kPanel;
}
int64_t panelFloats(int32_t in) {
  return int64_t(in) * kPanel;
}

// Columns [k0, k0 + n) of weight rows [out0, out0 + 32) of row-major `w` as n panel columns at
// dst (zeros past outFeatures).
void packBlock(const float *w, int32_t outFeatures, int32_t in, int32_t out0, int32_t k0, int32_t n,
               float *dst) {
  for (int32_t o = 0; o < kPanel; ++o) {
    if (out0 + o >= outFeatures) {
      for (int32_t i = 0; i < n; ++i)
        dst[i * kPanel + o] = 0.0f;
      continue;
    }
    const float *src = w + int64_t(out0 + o) * in + k0;
    for (int32_t i = 0; i < n; ++i)
      dst[i * kPanel + o] = src[i];
  }
}

// A block's weights for a micro-kernel: the columns of one or two panels, `panelStride` floats
// apart; vector v of column i is at w + (v / 2) * panelStride + i * 32 + (v % 2) * 16.
struct BlockWeights {
  const float *w;
  int64_t panelStride;
};

// Where the last block's sums go when they can go straight to the output (fp32, whole vectors):
// row r's outputs at out + r * stride, plus the bias (if any) at bias.
struct DirectStore {
  float *out;
  int64_t stride;
  const float *bias;
};

// c[r][0..16V) += sum over the block's n columns of x[r][i] * w[i][0..16V), each output one chain
// of fused multiply-adds in increasing i from zero (the first block stores its sums instead). x
// rows are xStride floats apart, c rows kTaskOutputs.
template <int R, int V>
void multiplyBlock(const float *x, int64_t xStride, BlockWeights w, int32_t n, bool first,
                   const DirectStore *direct, float *c) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      acc[r][v] = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; ++i) {
    const float *column = w.w + int64_t(i) * kPanel;
    if constexpr (V == 2) { // one panel a task: few rows, the weights stream from memory
      // Into L1 for one row; into L2 for more, whose x rows the stream would push out of L1 (and
      // L2's misses queue deeper): batch-8 steps 6% faster on the random 98.6M model, decode level.
      constexpr auto hint = R == 1 ? _MM_HINT_T0 : _MM_HINT_T1;
      _mm_prefetch(reinterpret_cast<const char *>(column) + kPrefetchBytes, hint);
      _mm_prefetch(reinterpret_cast<const char *>(column) + kPrefetchBytes + 64, hint);
    }
    __m512 weights[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      weights[v] = _mm512_loadu_ps(column + (v / 2) * w.panelStride + (v % 2) * 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xi = _mm512_set1_ps(x[r * xStride + i]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[r][v] = _mm512_fmadd_ps(xi, weights[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float *sums = c + r * kTaskOutputs + 16 * v;
      const __m512 total = first ? acc[r][v] : _mm512_add_ps(_mm512_loadu_ps(sums), acc[r][v]);
      if (!direct) {
        _mm512_storeu_ps(sums, total);
        continue;
      }
      const __m512 bias =
          direct->bias ? _mm512_loadu_ps(direct->bias + 16 * v) : _mm512_setzero_ps();
      _mm512_storeu_ps(direct->out + r * direct->stride + 16 * v,
                       direct->bias ? _mm512_add_ps(total, bias) : total);
    }
}

// Micro-kernels of V vectors (24 accumulators at most): multiplyBlock<R, V> for R = 1..24 / V.
using MultiplyFn = void (*)(const float *, int64_t, BlockWeights, int32_t, bool,
                            const DirectStore *, float *);
template <int V> constexpr int32_t kMicroRows = 24 / V;
template <int V, size_t... R>
constexpr std::array<MultiplyFn, sizeof...(R)> multiplyTable(std::index_sequence<R...>) {
  return {&multiplyBlock<int(R) + 1, V>...};
}
template <int V>
constexpr auto kMultiply = multiplyTable<V>(std::make_index_sequence<kMicroRows<V>>());

// Asks for the block's x of `rows` rows (xStride floats apart) to be brought into L1.
void prefetchX(const float *x, int64_t xStride, int32_t rows) {
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t i = 0; i < kBlockColumns; i += 16)
      _mm_prefetch(reinterpret_cast<const char *>(x + r * xStride + i), _MM_HINT_T0);
}

// The rows in as few micro-kernels as fit, of sizes differing by at most one (32 rows at 4 vectors:
// 6, 6, 5, 5, 5, 5, not five of 6 and a weak one of 2). Each micro-kernel first asks for the next
// one's x (the last for the next block's, of the first rows; a prefetch past the end of x does not
// fault): x rows are a row length apart, in L2 or beyond, and their broadcasts otherwise wait
// on them (5% of a 512-token prefill on SmolLM2-135M, docs/benchmarks.md).
template <int V>
void multiplyRows(const float *x, int64_t xStride, BlockWeights w, int32_t n, int32_t rows,
                  bool first, const DirectStore *direct, float *c) {
  const int32_t micros = (rows + kMicroRows<V> - 1) / kMicroRows<V>;
  for (int32_t m = 0, r = 0; m < micros; ++m) {
    const int32_t size = (rows - r) / (micros - m); // rounds down: the larger ones come first
    const int32_t take = (rows - r) % (micros - m) ? size + 1 : size;
    if (r + take < rows)
      prefetchX(x + (r + take) * xStride, xStride, std::min(kMicroRows<V>, rows - r - take));
    else
      prefetchX(x + kBlockColumns, xStride, std::min(kMicroRows<V>, rows));
    DirectStore rowsDirect;
    if (direct)
      rowsDirect = {direct->out + r * direct->stride, direct->stride, direct->bias};
    kMultiply<V>[take - 1](x + r * xStride, xStride, w, n, first, direct ? &rowsDirect : nullptr,
                           c + r * kTaskOutputs);
    r += take;
  }
}

// Rows x the outputs of panels [panel0, panel0 + panels) (one or two).
struct Task {
  int32_t row0, rows, panel0, panels;
};

// Adds the bias and stores the task's outputs from c (rows x kTaskOutputs).
void storeTask(const LinearArgs &args, const Task &t, float *c) {
  const int32_t out0 = t.panel0 * kPanel;
  const int32_t outs = std::min(t.panels * kPanel, args.outFeatures - out0);
  for (int32_t r = 0; r < t.rows; ++r) {
    float *row = c + r * kTaskOutputs;
    if (args.bias)
      for (int32_t o = 0; o < outs; ++o)
        row[o] += args.bias[out0 + o];
    storeRun(row, outs, args.out, args.outType, int64_t(t.row0 + r) * args.outFeatures + out0);
  }
}

// Scratch of one worker: the task's sums, and the block's x (x not fp32) and weights (not packed).
struct Scratch {
  float *c, *x, *w;
};

void runTask(const LinearArgs &args, const Task &t, const Scratch &s) {
  const int32_t in = args.inFeatures;
  const auto *packed = static_cast<const float *>(args.packedWeight);
  const int32_t out0 = t.panel0 * kPanel;
  // fp32 outputs of whole vectors take the last block's sums straight from the registers.
  const bool whole = out0 + t.panels * kPanel <= args.outFeatures;
  const bool storesDirect = whole && args.outType == ElemType::kF32 && in > 0;
  DirectStore direct{};
  if (storesDirect)
    direct = {static_cast<float *>(args.out) + int64_t(t.row0) * args.outFeatures + out0,
              args.outFeatures, args.bias ? args.bias + out0 : nullptr};
  if (in == 0) // no block to store the sums: they are zero
    std::memset(s.c, 0, sizeof(float) * size_t(t.rows) * kTaskOutputs);
  for (int32_t k0 = 0; k0 < in; k0 += kBlockColumns) {
    const int32_t n = std::min(kBlockColumns, in - k0);
    BlockWeights w{s.w, int64_t(kBlockColumns) * kPanel};
    if (packed)
      w = {packed + t.panel0 * panelFloats(in) + int64_t(k0) * kPanel, panelFloats(in)};
    else
      for (int32_t p = 0; p < t.panels; ++p)
        packBlock(static_cast<const float *>(args.weight), args.outFeatures, in,
                  (t.panel0 + p) * kPanel, k0, n, s.w + p * w.panelStride);
    const float *x = s.x;
    int64_t xStride = kBlockColumns;
    if (args.xType == ElemType::kF32) {
      x = static_cast<const float *>(args.x) + int64_t(t.row0) * in + k0;
      xStride = in;
    } else {
      for (int32_t r = 0; r < t.rows; ++r)
        loadRun(args.x, args.xType, int64_t(t.row0 + r) * in + k0, n, s.x + r * kBlockColumns);
    }
    const DirectStore *to = storesDirect && k0 + n == in ? &direct : nullptr;
    if (t.panels == 2)
      multiplyRows<4>(x, xStride, w, n, t.rows, k0 == 0, to, s.c);
    else
      multiplyRows<2>(x, xStride, w, n, t.rows, k0 == 0, to, s.c);
  }
  if (!storesDirect)
    storeTask(args, t, s.c);
}

} // namespace

size_t packedPanelBytes(int32_t outFeatures, int32_t inFeatures) {
  return static_cast<size_t>(panelsOf(outFeatures)) * static_cast<size_t>(panelFloats(inFeatures)) *
         sizeof(float);
}

void packPanels(const float *weight, int32_t outFeatures, int32_t inFeatures, void *packed) {
  const int32_t panels = panelsOf(outFeatures);
  parallelFor(int64_t(panels) * inFeatures > 65536, panels, [&](int64_t p) {
    float *dst = static_cast<float *>(packed) + p * panelFloats(inFeatures);
    for (int32_t k0 = 0; k0 < inFeatures; k0 += kBlockColumns)
      packBlock(weight, outFeatures, inFeatures, static_cast<int32_t>(p) * kPanel, k0,
                std::min(kBlockColumns, inFeatures - k0), dst + int64_t(k0) * kPanel);
  });
}

void linearPanels(const LinearArgs &args) {
  const int32_t rowTiles = (args.rows + kTaskRows - 1) / kTaskRows;
  const int32_t panels = panelsOf(args.outFeatures);
  // One row tile (decode, batches): a task is one panel, run by micro-kernels of up to 12 rows x 2
  // vectors, so there are enough tasks to share among the workers (a 576-output Linear has 18
  // panels); more rows: two panels, by micro-kernels of up to 6 rows x 4 vectors.
  const int32_t perTask = rowTiles == 1 ? 1 : kTaskOutputs / kPanel;
  const int32_t outTiles = (panels + perTask - 1) / perTask;
  const int64_t tasks = int64_t(rowTiles) * outTiles;
  const int64_t work = int64_t(args.rows) * args.inFeatures * args.outFeatures;
  parallelRun(work > 65536, [&](int worker, int workers) {
    const IndexRange range = staticRange(tasks, worker, workers);
    if (range.begin >= range.end)
      return;
    constexpr size_t kCFloats = size_t(kTaskRows) * kTaskOutputs;
    constexpr size_t kXFloats = size_t(kTaskRows) * kBlockColumns;
    constexpr size_t kWFloats = size_t(kBlockColumns) * kTaskOutputs;
    float *scratch = threadScratch(16 + kCFloats + kXFloats + kWFloats);
    float *c = scratch + ((64 - reinterpret_cast<uintptr_t>(scratch) % 64) % 64) / sizeof(float);
    const Scratch s{c, c + kCFloats, c + kCFloats + kXFloats};
    for (int64_t task = range.begin; task < range.end; ++task) {
      Task t;
      const int32_t outTile = static_cast<int32_t>(task / rowTiles);
      t.row0 = static_cast<int32_t>(task % rowTiles) * kTaskRows;
      t.rows = std::min(kTaskRows, args.rows - t.row0);
      t.panel0 = outTile * perTask;
      t.panels = std::min(perTask, panels - t.panel0);
      runTask(args, t, s);
    }
  });
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
