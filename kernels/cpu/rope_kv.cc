// RopeKvWrite for fp32/fp16/bf16 activations and cache. A half qkv row is widened once per token,
// rotated by the same fp32 code as an fp32 row, and each rotated q/k element is rounded once when
// stored; v is copied (bytes when the cache has the activations' type, else rounded once). With a
// layer's cache scales (an fp8 cache's k_scale / v_scale) k and v are divided by them in fp32
// before that rounding.
// The scaled modes (kLongShort, kDynamicNtk) pick each token's inverse frequencies from its
// sequence's length after the step, so a token's result still depends only on its own sequence.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/rope_angles.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
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
// straight into an fp32 destination, through `staging` (headDim floats) into a half one, each
// value divided by `scale` first when it is not 1 (an fp8 cache's k_scale).
void rotateHeadsInto(const float *x, int32_t heads, const float *cosines, const float *sines,
                     int32_t half, int32_t headDim, void *dst, ElemType type, int64_t offset,
                     int64_t headStride, float scale, float *staging) {
  for (int32_t h = 0; h < heads; ++h) {
    const int64_t at = offset + h * headStride;
    if (type == ElemType::kF32 && scale == 1.0f) {
      rotateHead(x + h * headDim, cosines, sines, half, headDim, static_cast<float *>(dst) + at);
    } else {
      rotateHead(x + h * headDim, cosines, sines, half, headDim, staging);
      storeScaledRun(staging, headDim, scale, dst, type, at);
    }
  }
}

// angles[i] = cos(angles[i]) and sines[i] = sin(angles[i]), i < n: lanes of double from avx2 up
// (rope_angles.h: correctly rounded), else std::cos and std::sin (within an ulp of those).
void cosSinOf(float *angles, int32_t n, float *sines) {
  if (activeCpuIsa() >= CpuIsa::kAvx512)
    return cosSinAvx512(angles, n, angles, sines);
  if (activeCpuIsa() >= CpuIsa::kAvx2)
    return cosSinAvx2(angles, n, angles, sines);
  for (int32_t i = 0; i < n; ++i) {
    sines[i] = std::sin(angles[i]);
    angles[i] = std::cos(angles[i]);
  }
}

// Scratch floats per thread: cos and sin; a dynamic-NTK row; a staging head; for half qkv, or
// with q/k norms, the widened (and normalized) row.
int64_t scratchFloats(const RopeKvWriteArgs &args, int64_t qkvStride) {
  const bool widen = args.type != ElemType::kF32 || args.qNorm;
  return 3 * int64_t(args.rotaryDim / 2) + args.headDim + (widen ? qkvStride : 0);
}

// L of token t's sequence: args.sequenceLengths' entry, else positions[its last token] + 1 (a
// sequence's positions in a step are consecutive, so that is its length after the step,
// transformers' max(position_ids) + 1 for it alone).
int32_t sequenceLength(const RopeKvWriteArgs &args, int32_t t) {
  const int32_t *ends = args.queryStartLoc + 1;
  const int32_t *end = std::upper_bound(ends, ends + args.numSeqs, t);
  if (end == ends + args.numSeqs)
    return args.positions[t] + 1;
  if (args.sequenceLengths)
    return args.sequenceLengths[end - ends];
  return args.positions[*end - 1] + 1;
}

// Qwen3RMSNorm of each of `heads` heads of `x` in place: x * rsqrt(mean(x^2) + eps), then times
// the weight, in fp32 (kernels/cpu/norm.cc's operation order).
void normalizeHeads(float *x, int32_t heads, int32_t headDim, const float *weight, float eps) {
  for (int32_t h = 0; h < heads; ++h) {
    float *head = x + static_cast<int64_t>(h) * headDim;
    float sumSquares = 0.0f;
    for (int32_t i = 0; i < headDim; ++i)
      sumSquares += head[i] * head[i];
    const float inverse = 1.0f / std::sqrt(sumSquares / static_cast<float>(headDim) + eps);
    for (int32_t i = 0; i < headDim; ++i)
      head[i] = weight[i] * (head[i] * inverse);
  }
}

// The inverse frequencies token t rotates with: a row of args.invFreq, or `dynamicRow` filled.
const float *invFreqOf(const RopeKvWriteArgs &args, int32_t t, float *dynamicRow) {
  if (args.mode == RopeMode::kStatic)
    return args.invFreq;
  const int32_t seqLen = sequenceLength(args, t);
  if (seqLen <= args.originalMaxPositions)
    return args.invFreq;
  if (args.mode == RopeMode::kLongShort)
    return args.invFreq + args.rotaryDim / 2;
  dynamicNtkInvFreq(args.ropeTheta, args.dynamicFactor, args.originalMaxPositions, args.rotaryDim,
                    seqLen, dynamicRow);
  return dynamicRow;
}

} // namespace

// transformers computes base' on 0-d float32 tensors, so every step is rounded to float32 and each
// Python scalar enters as a float32; `tensor ** python_float` raises the element in double. The
// fp32 powers base'^(2i/dim) are taken in double and rounded once (the correctly rounded fp32
// power, within an ulp of torch's vectorized powf), so kernels/cuda/rope_kv.cuh, which does the
// same, gets the same bits on a GPU.
void dynamicNtkInvFreq(float ropeTheta, double factor, int32_t maxPositions, int32_t rotaryDim,
                       int32_t seqLen, float *invFreq) {
  const float scaled = static_cast<float>(factor) * static_cast<float>(seqLen);
  const float ratio = scaled / static_cast<float>(maxPositions);
  const float shifted = ratio - static_cast<float>(factor - 1.0);
  const double exponent = static_cast<double>(rotaryDim) / (rotaryDim - 2);
  const float stretch = static_cast<float>(std::pow(static_cast<double>(shifted), exponent));
  const float base = ropeTheta * stretch;
  const float dim = static_cast<float>(rotaryDim);
  for (int32_t i = 0; i < rotaryDim / 2; ++i) {
    const float exponentI = static_cast<float>(2 * i) / dim;
    const float power =
        static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponentI)));
    invFreq[i] = 1.0f / power;
  }
}

void ropeKvWrite(const RopeKvWriteArgs &args) {
  const int64_t headDim = args.headDim;
  const int32_t half = args.rotaryDim / 2;
  const int64_t qkvStride = (args.numHeads + 2 * static_cast<int64_t>(args.numKvHeads)) * headDim;
  const int64_t qStride = args.numHeads * headDim;
  const int64_t blockStride = args.numKvHeads * args.blockSize * headDim;
  const int64_t blockRowStride = static_cast<int64_t>(args.blockSize) * headDim;
  parallelRun(args.numTokens > 1, [&](int worker, int workers) {
    float *cosines = threadScratch(static_cast<size_t>(scratchFloats(args, qkvStride)));
    float *sines = cosines + half;
    float *dynamicRow = sines + half;
    float *staging = dynamicRow + half;
    float *widened = staging + headDim;
    const float scaling = args.attentionScaling;
    const IndexRange tokens = staticRange(args.numTokens, worker, workers);
    for (int64_t t = tokens.begin; t < tokens.end; ++t) {
      // transformers computes position x inv_freq as one fp32 product per angle, then
      // cos(emb) * attention_scaling and sin(emb) * attention_scaling in fp32.
      const float position = static_cast<float>(args.positions[t]);
      const float *invFreq = invFreqOf(args, t, dynamicRow);
      for (int32_t i = 0; i < half; ++i)
        cosines[i] = position * invFreq[i]; // the angles, then their cosines in place
      cosSinOf(cosines, half, sines);
      for (int32_t i = 0; i < half; ++i) {
        cosines[i] = cosines[i] * scaling;
        sines[i] = sines[i] * scaling;
      }
      const float *qkv = static_cast<const float *>(args.qkv) + t * qkvStride;
      if (args.type != ElemType::kF32 || args.qNorm) {
        loadRun(args.qkv, args.type, t * qkvStride, qkvStride, widened);
        qkv = widened;
      }
      if (args.qNorm) {
        normalizeHeads(widened, args.numHeads, args.headDim, args.qNorm, args.qkNormEps);
        normalizeHeads(widened + args.numHeads * headDim, args.numKvHeads, args.headDim, args.kNorm,
                       args.qkNormEps);
      }
      rotateHeadsInto(qkv, args.numHeads, cosines, sines, half, args.headDim, args.q, args.type,
                      t * qStride, headDim, 1.0f, staging);
      const int32_t slot = args.slotMapping[t];
      if (slot < 0) // padding token (vLLM convention): nothing to cache
        continue;
      const int64_t block = slot / args.blockSize;
      const int64_t offset = slot % args.blockSize;
      const int64_t cacheOffset = block * blockStride + offset * headDim;
      const float *k = qkv + args.numHeads * headDim;
      rotateHeadsInto(k, args.numKvHeads, cosines, sines, half, args.headDim, args.kCache,
                      args.kvType, cacheOffset, blockRowStride, args.kScale, staging);
      // v's source elements: the row as stored, at the v heads.
      const int64_t vSource = t * qkvStride + (args.numHeads + args.numKvHeads) * headDim;
      for (int32_t h = 0; h < args.numKvHeads; ++h) {
        const int64_t at = cacheOffset + h * blockRowStride;
        if (args.vScale == 1.0f) {
          convertRun(args.qkv, args.type, vSource + h * headDim, args.vCache, args.kvType, at,
                     headDim, staging);
        } else {
          loadRun(args.qkv, args.type, vSource + h * headDim, headDim, staging);
          storeScaledRun(staging, headDim, args.vScale, args.vCache, args.kvType, at);
        }
      }
    }
  });
}

} // namespace kiln::kernels::cpu
