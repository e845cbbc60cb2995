#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/norm_rows.h"
#include "kernels/cpu/worker_pool.h"

#include <cmath>

namespace kiln::kernels::cpu {
namespace {

// Same operation order as transformers' LlamaRMSNorm in fp32:
// variance = mean(x^2); x = x * rsqrt(variance + eps); return weight * x.
void rmsNormRow(const float *x, const float *weight, float *out, int32_t hidden, float eps) {
  float sumSquares = 0.0f;
#pragma omp simd reduction(+ : sumSquares)
  for (int32_t i = 0; i < hidden; ++i)
    sumSquares += x[i] * x[i];
  const float variance = sumSquares / static_cast<float>(hidden);
  const float inverse = 1.0f / std::sqrt(variance + eps);
#pragma omp simd
  for (int32_t i = 0; i < hidden; ++i)
    out[i] = weight[i] * (x[i] * inverse);
}

constexpr int64_t kParallelElements = 16384;

// The fp32 row function of the active level: a widened fp16 row is normalised exactly as an fp32
// row of the same level (16 lanes from avx512 up, 8 at avx2, norm_rows.h).
void normalizeRow(const float *x, const float *weight, float *out, int32_t hidden, float eps) {
  if (activeCpuIsa() >= CpuIsa::kAvx512)
    return rmsNormRowsAvx512({x, weight, out, 1, hidden, eps}, 0, 1);
  if (activeCpuIsa() == CpuIsa::kAvx2)
    return rmsNormRowsAvx2({x, weight, out, 1, hidden, eps}, 0, 1);
  rmsNormRow(x, weight, out, hidden, eps);
}

// Each row of `x` widened to fp32 in scratch, `row(x, y)` computed, y rounded once into `out`.
template <class Row>
void widenedRows(const void *x, void *out, int64_t rows, int64_t hidden, ElemType type, Row row) {
  parallelRun(rows * hidden > kParallelElements, [&](int worker, int workers) {
    float *in = threadScratch(2 * static_cast<size_t>(hidden));
    float *y = in + hidden;
    const IndexRange range = staticRange(rows, worker, workers);
    for (int64_t r = range.begin; r < range.end; ++r) {
      loadRun(x, type, r * hidden, hidden, in);
      row(in, y);
      storeRun(y, hidden, out, type, r * hidden);
    }
  });
}

// Half rows: normalised in fp32 exactly as an fp32 row.
void rmsNormHalf(const RmsNormArgs &args) {
  widenedRows(args.x, args.out, args.rows, args.hidden, args.type, [&](const float *x, float *y) {
    normalizeRow(x, args.weight, y, args.hidden, args.eps);
  });
}

// Half rows: the residual sum is rounded once when stored (as transformers' half `residual + x`),
// and the norm reads the residual as stored.
void addRmsNormHalf(const AddRmsNormArgs &args) {
  const int64_t hidden = args.hidden;
  parallelRun(args.rows * hidden > kParallelElements, [&](int worker, int workers) {
    float *sum = threadScratch(3 * static_cast<size_t>(hidden));
    float *x = sum + hidden;
    float *y = x + hidden;
    const IndexRange rows = staticRange(args.rows, worker, workers);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      loadRun(args.residual, args.type, r * hidden, hidden, sum);
      loadRun(args.x, args.type, r * hidden, hidden, x);
#pragma omp simd
      for (int64_t i = 0; i < hidden; ++i)
        sum[i] += x[i];
      storeRun(sum, hidden, args.residual, args.type, r * hidden);
      loadRun(args.residual, args.type, r * hidden, hidden, sum);
      normalizeRow(sum, args.weight, y, args.hidden, args.eps);
      storeRun(y, hidden, args.out, args.type, r * hidden);
    }
  });
}

// fp32 and bf16 rows from the avx2 level up: 8 or 16 lanes (norm_rows.h).
bool normOnLanes(ElemType type) {
  return activeCpuIsa() >= CpuIsa::kAvx2 && (type == ElemType::kF32 || type == ElemType::kBF16);
}

// rows(begin, end) over the workers' static shares of `rows`.
template <class Rows> void normRows(int64_t rows, int64_t elements, Rows &&run) {
  parallelRun(elements > kParallelElements, [&](int worker, int workers) {
    const IndexRange range = staticRange(rows, worker, workers);
    run(range.begin, range.end);
  });
}

// torch's layer_norm in fp32: mean, then the biased variance of x - mean; (x - mean) * rstd * w +
// b.
void layerNormRow(const float *x, const float *weight, const float *bias, float *out,
                  int32_t hidden, float eps) {
  float sum = 0.0f;
  for (int32_t i = 0; i < hidden; ++i)
    sum += x[i];
  const float mean = sum / static_cast<float>(hidden);
  float squares = 0.0f;
  for (int32_t i = 0; i < hidden; ++i)
    squares += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(hidden) + eps);
  for (int32_t i = 0; i < hidden; ++i)
    out[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

} // namespace

// Rows widened to fp32 in scratch whatever their dtype, each output rounded once.
void layerNorm(const LayerNormArgs &args) {
  widenedRows(args.x, args.out, args.rows, args.hidden, args.type, [&](const float *x, float *y) {
    layerNormRow(x, args.weight, args.bias, y, args.hidden, args.eps);
  });
}

void rmsNorm(const RmsNormArgs &args) {
  if (normOnLanes(args.type))
    return normRows(args.rows, int64_t(args.rows) * args.hidden, [&](int64_t begin, int64_t end) {
      if (activeCpuIsa() >= CpuIsa::kAvx512)
        return rmsNormRowsAvx512(args, begin, end);
      rmsNormRowsAvx2(args, begin, end);
    });
  if (args.type != ElemType::kF32)
    return rmsNormHalf(args);
  const int64_t hidden = args.hidden;
  const auto *x = static_cast<const float *>(args.x);
  auto *out = static_cast<float *>(args.out);
  parallelFor(args.rows * hidden > kParallelElements, args.rows, [&](int64_t r) {
    rmsNormRow(x + r * hidden, args.weight, out + r * hidden, args.hidden, args.eps);
  });
}

void addRmsNorm(const AddRmsNormArgs &args) {
  if (normOnLanes(args.type))
    return normRows(args.rows, int64_t(args.rows) * args.hidden, [&](int64_t begin, int64_t end) {
      if (activeCpuIsa() >= CpuIsa::kAvx512)
        return addRmsNormRowsAvx512(args, begin, end);
      addRmsNormRowsAvx2(args, begin, end);
    });
  if (args.type != ElemType::kF32)
    return addRmsNormHalf(args);
  const int64_t hidden = args.hidden;
  parallelFor(args.rows * hidden > kParallelElements, args.rows, [&](int64_t r) {
    float *residual = static_cast<float *>(args.residual) + r * hidden;
    const float *x = static_cast<const float *>(args.x) + r * hidden;
#pragma omp simd
    for (int64_t i = 0; i < hidden; ++i)
      residual[i] += x[i];
    rmsNormRow(residual, args.weight, static_cast<float *>(args.out) + r * hidden, args.hidden,
               args.eps);
  });
}

} // namespace kiln::kernels::cpu
