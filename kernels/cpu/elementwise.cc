#include "kernels/cpu/kernels.h"

#include <cmath>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 32768;
} // namespace

void siluMul(const SiluMulArgs &args) {
  const int64_t intermediate = args.intermediate;
#pragma omp parallel for schedule(static) if (args.rows * intermediate > kParallelElements)
  for (int32_t r = 0; r < args.rows; ++r) {
    const float *gate = args.gateUp + r * 2 * intermediate;
    const float *up = gate + intermediate;
    float *out = args.out + r * intermediate;
    for (int64_t i = 0; i < intermediate; ++i) {
      // torch's silu in fp32; exp(-x) overflowing to inf for x < -88 correctly gives -0.
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }
}

void add(const AddArgs &args) {
#pragma omp parallel for simd schedule(static) if (args.count > kParallelElements)
  for (int64_t i = 0; i < args.count; ++i)
    args.out[i] = args.a[i] + args.b[i];
}

void gatherRows(const GatherRowsArgs &args) {
  const int64_t width = args.width;
#pragma omp parallel for schedule(static) if (args.numRows * width > kParallelElements)
  for (int32_t i = 0; i < args.numRows; ++i)
    std::memcpy(args.out + i * width, args.x + static_cast<int64_t>(args.indices[i]) * width,
                width * sizeof(float));
}

} // namespace kiln::kernels::cpu
