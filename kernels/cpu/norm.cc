#include "kernels/cpu/kernels.h"

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

} // namespace

void rmsNorm(const RmsNormArgs &args) {
  const int64_t hidden = args.hidden;
#pragma omp parallel for schedule(static) if (args.rows * hidden > kParallelElements)
  for (int32_t r = 0; r < args.rows; ++r)
    rmsNormRow(args.x + r * hidden, args.weight, args.out + r * hidden, args.hidden, args.eps);
}

void addRmsNorm(const AddRmsNormArgs &args) {
  const int64_t hidden = args.hidden;
#pragma omp parallel for schedule(static) if (args.rows * hidden > kParallelElements)
  for (int32_t r = 0; r < args.rows; ++r) {
    float *residual = args.residual + r * hidden;
    const float *x = args.x + r * hidden;
#pragma omp simd
    for (int64_t i = 0; i < hidden; ++i)
      residual[i] += x[i];
    rmsNormRow(residual, args.weight, args.out + r * hidden, args.hidden, args.eps);
  }
}

} // namespace kiln::kernels::cpu
