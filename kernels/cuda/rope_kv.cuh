// RoPE fused with the paged KV-cache write (plan.fbs RopeKvWrite).
//
// Grid rule: grid.x = numTokens (x_rows Tokens, x_per_block 1), grid.y = kRopeCtasPerToken (any
// count works), block = THREADS, no dynamic shared memory. The gridDim.y CTAs of a token each
// compute its ROTARY_DIM / 2 angles into shared memory, then their threads stride together over
// (H + KV) * ROTARY_DIM / 2 rotation pairs, the dims past ROTARY_DIM, and KV * HEAD_DIM values
// of v.
//
// inv_freq is data (an fp32 table), so llama3, linear or yarn scaling needs no kernel change.
// Angles are float(pos) * inv_freq[i] in fp32, cos/sin with the accurate cosf/sinf times
// p.attentionScaling, and q*cos + rotate_half(q)*sin is computed in fp32 and rounded once when
// stored: q to T, k to the cache's KV (T, or another dtype with `--kv-dtype`: Fp8E4M3, fp16,
// bf16), v rounded once from T to KV (plan.fbs; the CPU reference's operation order).
//
// The run-time modes (p.mode; kernels/cpu/kernels.h RopeMode) pick the row from the token's
// sequence length L (p.sequenceLengths, else positions[last token of its sequence] + 1):
// kRopeLongShort the second row of
// invFreq when L > originalMaxPositions; kRopeDynamicNtk the row recomputed for L with the steps
// of kernels/cpu/rope_kv.cc dynamicNtkInvFreq (double powers rounded once, so the bits match).
// The static path reads only p.mode beyond what it always read.
//
// With p.qNorm (Qwen3), every q and k head is first RMS-normalized over HEAD_DIM (one warp per
// head, sums of squares in fp32, rsqrt(mean + eps)) and scaled by its weight, as the CPU
// reference's normalizeHeads; the sums run in another order, so results agree within rounding.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// L of token t: its sequence's p.sequenceLengths entry, else positions[last token of its
// sequence] + 1 (the first sequence s with queryStartLoc[s + 1] > t holds t; past the last one,
// the token's own position + 1).
__device__ __forceinline__ int ropeSequenceLength(const RopeKvWriteParams &p, int t) {
  int lo = 0;
  int hi = p.numSeqs;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (p.queryStartLoc[mid + 1] > t)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo >= p.numSeqs)
    return p.positions[t] + 1;
  return p.sequenceLengths ? p.sequenceLengths[lo] : p.positions[p.queryStartLoc[lo + 1] - 1] + 1;
}

// base' of dynamic NTK for a sequence of seqLen tokens, kernels/cpu/rope_kv.cc's float32 steps.
__device__ __forceinline__ float dynamicNtkBase(const RopeKvWriteParams &p, int seqLen,
                                                int rotaryDim) {
  const float scaled = static_cast<float>(p.dynamicFactor) * static_cast<float>(seqLen);
  const float ratio = scaled / static_cast<float>(p.originalMaxPositions);
  const float shifted = ratio - static_cast<float>(p.dynamicFactor - 1.0);
  const double exponent = static_cast<double>(rotaryDim) / (rotaryDim - 2);
  const float stretch = static_cast<float>(pow(static_cast<double>(shifted), exponent));
  return p.ropeTheta * stretch;
}

template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int ROTARY_DIM, int BLOCK_SIZE,
          int THREADS, typename KV>
__device__ __forceinline__ void ropeKvWrite(const RopeKvWriteParams &p) {
  static_assert(NUM_HEADS % NUM_KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(ROTARY_DIM % 2 == 0 && ROTARY_DIM <= HEAD_DIM, "rotary dim: even, <= head dim");
  constexpr int kHalf = ROTARY_DIM / 2;
  constexpr int kRotatedHeads = NUM_HEADS + NUM_KV_HEADS;
  constexpr int kPass = HEAD_DIM - ROTARY_DIM;
  constexpr int64_t kRowWidth = (NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM;
  __shared__ float cosines[kHalf > 0 ? kHalf : 1];
  __shared__ float sines[kHalf > 0 ? kHalf : 1];
  __shared__ float headScale[kRotatedHeads]; // rsqrt(mean(x^2) + eps) per head, with p.qNorm

  const int t = blockIdx.x;
  if (t >= p.numTokens)
    return;
  const T *row = static_cast<const T *>(p.qkv) + t * kRowWidth;
  if (p.qNorm) {
    const int lane = threadIdx.x % 32;
    for (int h = threadIdx.x / 32; h < kRotatedHeads; h += THREADS / 32) {
      float sumSquares = 0.0f;
      for (int d = lane; d < HEAD_DIM; d += 32) {
        const float x = toFloat<T>(row[h * HEAD_DIM + d]);
        sumSquares += x * x;
      }
      sumSquares = warpSum(sumSquares);
      if (lane == 0)
        headScale[h] = 1.0f / sqrtf(sumSquares / static_cast<float>(HEAD_DIM) + p.qkNormEps);
    }
  }
  const float position = static_cast<float>(p.positions[t]);
  const float *invFreq = p.invFreq;
  float dynamicBase = 0.0f; // > 0: this token's row is dynamic NTK's for its L
  if (p.mode != kRopeStatic) {
    const int seqLen = ropeSequenceLength(p, t);
    if (seqLen > p.originalMaxPositions) {
      if (p.mode == kRopeLongShort)
        invFreq += kHalf;
      else
        dynamicBase = dynamicNtkBase(p, seqLen, ROTARY_DIM);
    }
  }
  for (int i = threadIdx.x; i < kHalf; i += THREADS) {
    float inverse;
    if (dynamicBase > 0.0f) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(ROTARY_DIM);
      inverse = 1.0f / static_cast<float>(
                           pow(static_cast<double>(dynamicBase), static_cast<double>(exponent)));
    } else {
      inverse = invFreq[i];
    }
    const float angle = position * inverse;
    cosines[i] = cosf(angle) * p.attentionScaling;
    sines[i] = sinf(angle) * p.attentionScaling;
  }
  __syncthreads();

  // Element d of rotated head h as the rotation reads it: normalized and scaled with p.qNorm.
  auto load = [&](int h, int d) -> float {
    const float x = toFloat<T>(row[h * HEAD_DIM + d]);
    if (!p.qNorm)
      return x;
    const float *weight = h < NUM_HEADS ? p.qNorm : p.kNorm;
    return weight[d] * (x * headScale[h]);
  };
  const int slot = p.slotMapping[t];
  const bool cached = slot >= 0; // a negative slot is a padding token: rotate q, cache nothing
  const int64_t cacheBase =
      cached ? (static_cast<int64_t>(slot / BLOCK_SIZE) * NUM_KV_HEADS * BLOCK_SIZE +
                slot % BLOCK_SIZE) *
                   HEAD_DIM
             : 0;
  T *qOut = static_cast<T *>(p.q) + static_cast<int64_t>(t) * NUM_HEADS * HEAD_DIM;
  KV *kCache = static_cast<KV *>(p.kCache);
  KV *vCache = static_cast<KV *>(p.vCache);
  // Head h's dim d, rounded once: q heads to the q output (T), k heads to the cache (KV; nowhere
  // for a padding token).
  auto store = [&](int h, int d, float value) {
    if (h < NUM_HEADS)
      qOut[h * HEAD_DIM + d] = fromFloat<T>(value);
    else if (cached)
      kCache[cacheBase + static_cast<int64_t>(h - NUM_HEADS) * BLOCK_SIZE * HEAD_DIM + d] =
          kvFromFloat<KV>(value, p.kScale);
  };

  const int first = blockIdx.y * THREADS + threadIdx.x;
  const int stride = gridDim.y * THREADS;
  for (int item = first; item < kRotatedHeads * kHalf; item += stride) {
    const int h = item / kHalf;
    const int i = item % kHalf;
    if (h >= NUM_HEADS && !cached)
      continue;
    const float x0 = load(h, i);
    const float x1 = load(h, i + kHalf);
    const float c = cosines[i];
    const float s = sines[i];
    store(h, i, x0 * c + (-x1) * s);
    store(h, i + kHalf, x1 * c + x0 * s);
  }
  for (int item = first; item < kRotatedHeads * kPass; item += stride) {
    const int h = item / (kPass > 0 ? kPass : 1);
    const int d = ROTARY_DIM + item % (kPass > 0 ? kPass : 1);
    store(h, d, load(h, d)); // without a norm: the element as read, exact in fp32
  }
  if (!cached)
    return;
  const T *v = row + (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM;
  for (int item = first; item < NUM_KV_HEADS * HEAD_DIM; item += stride) {
    const int h = item / HEAD_DIM;
    const int d = item % HEAD_DIM;
    vCache[cacheBase + static_cast<int64_t>(h) * BLOCK_SIZE * HEAD_DIM + d] =
        kvFromFloat<KV>(toFloat<T>(v[item]), p.vScale);
  }
}

} // namespace kiln::kernels::cuda
