#include "kernels/cpu/kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

// HF rotate_half on the first rotaryDim dims: out = x * cos + rotate_half(x) * sin, in fp32 with
// the same two products and one add per element; dims past rotaryDim pass through.
void rotateHead(const float *x, const float *cosines, const float *sines, int32_t half,
                int32_t headDim, float *out) {
  for (int32_t i = 0; i < half; ++i) {
    const float x0 = x[i];
    const float x1 = x[i + half];
    out[i] = x0 * cosines[i] + (-x1) * sines[i];
    out[i + half] = x1 * cosines[i] + x0 * sines[i];
  }
  for (int32_t i = 2 * half; i < headDim; ++i)
    out[i] = x[i];
}

} // namespace

void ropeKvWrite(const RopeKvWriteArgs &args) {
  const int64_t headDim = args.headDim;
  const int32_t half = args.rotaryDim / 2;
  const int64_t qkvStride = (args.numHeads + 2 * static_cast<int64_t>(args.numKvHeads)) * headDim;
  const int64_t qStride = args.numHeads * headDim;
  const int64_t blockStride = args.numKvHeads * args.blockSize * headDim;
#pragma omp parallel if (args.numTokens > 1)
  {
    std::vector<float> angles(2 * static_cast<size_t>(half));
    float *cosines = angles.data();
    float *sines = cosines + half;
#pragma omp for schedule(static)
    for (int32_t t = 0; t < args.numTokens; ++t) {
      // transformers computes inv_freq x position as an fp32 matmul: one fp32 product per angle.
      const float position = static_cast<float>(args.positions[t]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = position * args.invFreq[i];
        cosines[i] = std::cos(angle);
        sines[i] = std::sin(angle);
      }
      const float *qkv = args.qkv + t * qkvStride;
      for (int32_t h = 0; h < args.numHeads; ++h)
        rotateHead(qkv + h * headDim, cosines, sines, half, args.headDim,
                   args.q + t * qStride + h * headDim);
      const int32_t slot = args.slotMapping[t];
      if (slot < 0) // padding token (vLLM convention): nothing to cache
        continue;
      const int64_t block = slot / args.blockSize;
      const int64_t offset = slot % args.blockSize;
      const float *k = qkv + args.numHeads * headDim;
      const float *v = k + args.numKvHeads * headDim;
      for (int32_t h = 0; h < args.numKvHeads; ++h) {
        const int64_t cacheOffset =
            block * blockStride + (h * static_cast<int64_t>(args.blockSize) + offset) * headDim;
        rotateHead(k + h * headDim, cosines, sines, half, args.headDim,
                   args.kCache + cacheOffset);
        std::memcpy(args.vCache + cacheOffset, v + h * headDim, headDim * sizeof(float));
      }
    }
  }
}

} // namespace kiln::kernels::cpu
