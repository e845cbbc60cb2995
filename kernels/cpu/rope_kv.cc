// RopeKvWrite for fp32/fp16/bf16 activations and cache. A half qkv row is widened once per token,
// rotated by the same fp32 code as an fp32 row, and each rotated q/k element is rounded once when
// stored; v is copied (bytes when the cache has the activations' type, else rounded once).
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"

#include <cmath>
#include <cstring>

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

// Rotates `heads` heads of the fp32 row `x` into elements [offset, ...) of `dst` (of `type`):
// straight into an fp32 destination, through `staging` (headDim floats) into a half one.
void rotateHeadsInto(const float *x, int32_t heads, const float *cosines, const float *sines,
                     int32_t half, int32_t headDim, void *dst, ElemType type, int64_t offset,
                     int64_t headStride, float *staging) {
  for (int32_t h = 0; h < heads; ++h) {
    const int64_t at = offset + h * headStride;
    if (type == ElemType::kF32) {
      rotateHead(x + h * headDim, cosines, sines, half, headDim, static_cast<float *>(dst) + at);
    } else {
      rotateHead(x + h * headDim, cosines, sines, half, headDim, staging);
      storeRun(staging, headDim, dst, type, at);
    }
  }
}

// Scratch floats per thread: cos and sin; for half qkv the widened row; a staging head.
int64_t scratchFloats(const RopeKvWriteArgs &args, int64_t qkvStride) {
  return 2 * int64_t(args.rotaryDim / 2) + args.headDim +
         (args.type == ElemType::kF32 ? 0 : qkvStride);
}

} // namespace

void ropeKvWrite(const RopeKvWriteArgs &args) {
  const int64_t headDim = args.headDim;
  const int32_t half = args.rotaryDim / 2;
  const int64_t qkvStride = (args.numHeads + 2 * static_cast<int64_t>(args.numKvHeads)) * headDim;
  const int64_t qStride = args.numHeads * headDim;
  const int64_t blockStride = args.numKvHeads * args.blockSize * headDim;
  const int64_t blockRowStride = static_cast<int64_t>(args.blockSize) * headDim;
#pragma omp parallel if (args.numTokens > 1)
  {
    float *cosines = threadScratch(static_cast<size_t>(scratchFloats(args, qkvStride)));
    float *sines = cosines + half;
    float *staging = sines + half;
    float *widened = staging + headDim;
#pragma omp for schedule(static)
    for (int32_t t = 0; t < args.numTokens; ++t) {
      // transformers computes inv_freq x position as an fp32 matmul: one fp32 product per angle.
      const float position = static_cast<float>(args.positions[t]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = position * args.invFreq[i];
        cosines[i] = std::cos(angle);
        sines[i] = std::sin(angle);
      }
      const float *qkv = static_cast<const float *>(args.qkv) + t * qkvStride;
      if (args.type != ElemType::kF32) {
        loadRun(args.qkv, args.type, t * qkvStride, qkvStride, widened);
        qkv = widened;
      }
      rotateHeadsInto(qkv, args.numHeads, cosines, sines, half, args.headDim, args.q, args.type,
                      t * qStride, headDim, staging);
      const int32_t slot = args.slotMapping[t];
      if (slot < 0) // padding token (vLLM convention): nothing to cache
        continue;
      const int64_t block = slot / args.blockSize;
      const int64_t offset = slot % args.blockSize;
      const int64_t cacheOffset = block * blockStride + offset * headDim;
      const float *k = qkv + args.numHeads * headDim;
      rotateHeadsInto(k, args.numKvHeads, cosines, sines, half, args.headDim, args.kCache,
                      args.kvType, cacheOffset, blockRowStride, staging);
      // v's source elements: the row as stored, at the v heads.
      const int64_t vSource = t * qkvStride + (args.numHeads + args.numKvHeads) * headDim;
      for (int32_t h = 0; h < args.numKvHeads; ++h)
        convertRun(args.qkv, args.type, vSource + h * headDim, args.vCache, args.kvType,
                   cacheOffset + h * blockRowStride, headDim, staging);
    }
  }
}

} // namespace kiln::kernels::cpu
