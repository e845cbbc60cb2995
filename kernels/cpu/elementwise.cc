#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/silu_row.h"
#include "kernels/cpu/softcap.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 32768;
// Half Add works through runs of this many elements (widen a and b, add, round once).
constexpr int64_t kAddRun = 1024;

// silu(g) * up = g / (1 + e^-g) * up, as torch in fp32 but with e^x on 4 lanes (vector_exp.h,
// within 2 ulp of std::exp): e^-g overflowing to inf for g < -88.7 still gives -0. The last
// partial group of 4 runs through the same lanes, so every element gets the same arithmetic.
inline F32x4 siluMul4(F32x4 g, F32x4 up) {
  return g / (1.0f + expF32x4(-g)) * up;
}

void siluMulRow(const float *gate, const float *up, float *out, int64_t intermediate) {
  int64_t i = 0;
  for (; i + 4 <= intermediate; i += 4)
    storeF32x4(out + i, siluMul4(loadF32x4(gate + i), loadF32x4(up + i)));
  if (i < intermediate) {
    F32x4 g = {}, u = {};
    const int64_t n = intermediate - i;
    std::memcpy(&g, gate + i, n * sizeof(float));
    std::memcpy(&u, up + i, n * sizeof(float));
    const F32x4 y = siluMul4(g, u);
    std::memcpy(out + i, &y, n * sizeof(float));
  }
}

// The fp32 row function of the active level (16 lanes from avx512 up, 8 at avx2, silu_row.h): a
// widened fp16 row takes the fp32 row's function, so it is that row rounded.
using SiluRowFn = void (*)(const float *, const float *, float *, int64_t);
SiluRowFn siluRowFunction() {
  const CpuIsa isa = activeCpuIsa();
  return isa >= CpuIsa::kAvx512 ? siluMulRowAvx512
                                : (isa == CpuIsa::kAvx2 ? siluMulRowAvx2 : siluMulRow);
}

// Gated rows through fp32 scratch: each row widened, `row` run on it, the result rounded once to
// the args' type (the same fp32 arithmetic whatever the type).
void gatedRowsInScratch(const SiluMulArgs &args, SiluRowFn row) {
  const int64_t intermediate = args.intermediate;
  parallelRun(args.rows * intermediate > kParallelElements, [&](int worker, int workers) {
    float *gateUp = threadScratch(3 * static_cast<size_t>(intermediate));
    float *out = gateUp + 2 * intermediate;
    const IndexRange rows = staticRange(args.rows, worker, workers);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      loadRun(args.gateUp, args.type, r * 2 * intermediate, 2 * intermediate, gateUp);
      row(gateUp, gateUp + intermediate, out, intermediate);
      storeRun(out, intermediate, args.out, args.type, r * intermediate);
    }
  });
}

void addHalf(const AddArgs &args) {
  const int64_t runs = (args.count + kAddRun - 1) / kAddRun;
  parallelRun(args.count > kParallelElements, [&](int worker, int workers) {
    float *a = threadScratch(2 * kAddRun);
    float *b = a + kAddRun;
    const IndexRange range = staticRange(runs, worker, workers);
    for (int64_t run = range.begin; run < range.end; ++run) {
      const int64_t begin = run * kAddRun;
      const int64_t n = std::min(kAddRun, args.count - begin);
      loadRun(args.a, args.type, begin, n, a);
      loadRun(args.b, args.type, begin, n, b);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        a[i] += b[i];
      storeRun(a, n, args.out, args.type, begin);
    }
  });
}

} // namespace

void siluMul(const SiluMulArgs &args) {
  const CpuIsa isa = activeCpuIsa();
  if (isa >= CpuIsa::kAvx2 && (args.type == ElemType::kF32 || args.type == ElemType::kBF16)) {
    parallelRun(args.rows * int64_t(args.intermediate) > kParallelElements,
                [&](int worker, int workers) {
                  const IndexRange rows = staticRange(args.rows, worker, workers);
                  if (isa >= CpuIsa::kAvx512)
                    siluMulRowsAvx512(args, rows.begin, rows.end);
                  else
                    siluMulRowsAvx2(args, rows.begin, rows.end);
                });
    return;
  }
  if (args.type != ElemType::kF32)
    return gatedRowsInScratch(args, siluRowFunction());
  const int64_t intermediate = args.intermediate;
  const auto *gateUp = static_cast<const float *>(args.gateUp);
  auto *out = static_cast<float *>(args.out);
  const SiluRowFn row = siluRowFunction();
  parallelFor(args.rows * intermediate > kParallelElements, args.rows, [&](int64_t r) {
    const float *gate = gateUp + r * 2 * intermediate;
    row(gate, gate + intermediate, out + r * intermediate, intermediate);
  });
}

void add(const AddArgs &args) {
  if (args.type != ElemType::kF32)
    return addHalf(args);
  const auto *a = static_cast<const float *>(args.a);
  const auto *b = static_cast<const float *>(args.b);
  auto *out = static_cast<float *>(args.out);
  parallelRun(args.count > kParallelElements, [&](int worker, int workers) {
    const IndexRange range = staticRange(args.count, worker, workers);
#pragma omp simd
    for (int64_t i = range.begin; i < range.end; ++i)
      out[i] = a[i] + b[i];
  });
}

void gatherRows(const GatherRowsArgs &args) {
  const int64_t rowBytes = args.width * elemBytes(args.type);
  const auto *x = static_cast<const uint8_t *>(args.x);
  auto *out = static_cast<uint8_t *>(args.out);
  parallelFor(args.numRows * int64_t(args.width) > kParallelElements, args.numRows, [&](int64_t i) {
    std::memcpy(out + i * rowBytes, x + static_cast<int64_t>(args.indices[i]) * rowBytes, rowBytes);
  });
}

namespace {

// torch's gelu(approximate="tanh") on one float, in its order of operations.
inline float geluTanh(float x) {
  constexpr float kBeta = 0.7978845608028654f; // sqrt(2 / pi) = M_SQRT2 * M_2_SQRTPI * 0.5
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * (x * x * x));
  return 0.5f * x * (1.0f + std::tanh(inner));
}

void geluTanhMulRow(const float *gate, const float *up, float *out, int64_t intermediate) {
  for (int64_t i = 0; i < intermediate; ++i)
    out[i] = geluTanh(gate[i]) * up[i];
}

// out[i] = f(x[i]) in fp32 over `count` elements of `type`, in runs widened in scratch, each output
// rounded once; out may be x.
template <class F> void mapElements(const void *x, void *out, int64_t count, ElemType type, F f) {
  constexpr int64_t kRun = 1024;
  const int64_t runs = (count + kRun - 1) / kRun;
  parallelRun(count > kParallelElements, [&](int worker, int workers) {
    float *v = threadScratch(kRun);
    const IndexRange range = staticRange(runs, worker, workers);
    for (int64_t run = range.begin; run < range.end; ++run) {
      const int64_t begin = run * kRun;
      const int64_t n = std::min(kRun, count - begin);
      loadRun(x, type, begin, n, v);
      for (int64_t i = 0; i < n; ++i)
        v[i] = f(v[i]);
      storeRun(v, n, out, type, begin);
    }
  });
}

} // namespace

// The same arithmetic at every ISA level.
void geluTanhMul(const SiluMulArgs &args) {
  gatedRowsInScratch(args, geluTanhMulRow);
}

void gelu(const GeluArgs &args) {
  mapElements(args.x, args.out, args.count, args.type,
              [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); });
}

// Rows widened in scratch (x, a, b), the same fp32 arithmetic whatever the type.
void sigmoidGatedAdd(const SigmoidGatedAddArgs &args) {
  const int64_t width = args.width;
  parallelRun(args.rows * width > kParallelElements, [&](int worker, int workers) {
    float *x = threadScratch(3 * static_cast<size_t>(width));
    float *a = x + width;
    float *b = a + width;
    const IndexRange rows = staticRange(args.rows, worker, workers);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      loadRun(args.x, args.type, r * width, width, x);
      float dot = 0.0f;
      for (int64_t i = 0; i < width; ++i)
        dot += x[i] * args.weight[i];
      const float gate = 1.0f / (1.0f + std::exp(-dot));
      loadRun(args.a, args.type, r * width, width, a);
      loadRun(args.b, args.type, r * width, width, b);
      for (int64_t i = 0; i < width; ++i)
        a[i] += gate * b[i];
      storeRun(a, width, args.out, args.type, r * width);
    }
  });
}

void softcap(const SoftcapArgs &args) {
  mapElements(args.x, args.out, args.count, args.type,
              [cap = args.cap](float x) { return softcapValue(x, cap); });
}

} // namespace kiln::kernels::cpu
