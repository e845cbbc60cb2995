// RoPE fused with the paged KV-cache write (plan.fbs RopeKvWrite).
//
// Grid rule: grid.x = numTokens (x_rows Tokens, x_per_block 1), grid.y = kRopeCtasPerToken (any
// count works), block = THREADS, no dynamic shared memory. The gridDim.y CTAs of a token each
// compute its ROTARY_DIM / 2 angles into shared memory, then their threads stride together over
// (H + KV) * ROTARY_DIM / 2 rotation pairs, the dims past ROTARY_DIM, and KV * HEAD_DIM values
// of v.
//
// inv_freq is data (an fp32 table), so llama3 or linear scaling needs no kernel change. Angles
// are float(pos) * inv_freq[i] in fp32, cos/sin with the accurate cosf/sinf, and
// q*cos + rotate_half(q)*sin is computed in fp32 and rounded once to T when stored (plan.fbs; the
// CPU reference's operation order).
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

template <typename T, int NUM_HEADS, int NUM_KV_HEADS, int HEAD_DIM, int ROTARY_DIM, int BLOCK_SIZE,
          int THREADS>
__device__ __forceinline__ void ropeKvWrite(const RopeKvWriteParams &p) {
  static_assert(NUM_HEADS % NUM_KV_HEADS == 0, "query heads must be a multiple of kv heads");
  static_assert(ROTARY_DIM % 2 == 0 && ROTARY_DIM <= HEAD_DIM, "rotary dim: even, <= head dim");
  constexpr int kHalf = ROTARY_DIM / 2;
  constexpr int kRotatedHeads = NUM_HEADS + NUM_KV_HEADS;
  constexpr int kPass = HEAD_DIM - ROTARY_DIM;
  constexpr int64_t kRowWidth = (NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM;
  __shared__ float cosines[kHalf > 0 ? kHalf : 1];
  __shared__ float sines[kHalf > 0 ? kHalf : 1];

  const int t = blockIdx.x;
  if (t >= p.numTokens)
    return;
  const float position = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < kHalf; i += THREADS) {
    const float angle = position * p.invFreq[i];
    cosines[i] = cosf(angle);
    sines[i] = sinf(angle);
  }
  __syncthreads();

  const T *row = static_cast<const T *>(p.qkv) + t * kRowWidth;
  const int slot = p.slotMapping[t];
  const bool cached = slot >= 0; // a negative slot is a padding token: rotate q, cache nothing
  const int64_t cacheBase =
      cached ? (static_cast<int64_t>(slot / BLOCK_SIZE) * NUM_KV_HEADS * BLOCK_SIZE +
                slot % BLOCK_SIZE) *
                   HEAD_DIM
             : 0;
  T *qOut = static_cast<T *>(p.q) + static_cast<int64_t>(t) * NUM_HEADS * HEAD_DIM;
  T *kCache = static_cast<T *>(p.kCache);
  T *vCache = static_cast<T *>(p.vCache);
  // Where head h's dim d goes: q heads to the q output, k heads to the cache (or nowhere).
  auto target = [&](int h, int d) -> T * {
    if (h < NUM_HEADS)
      return qOut + h * HEAD_DIM + d;
    if (!cached)
      return nullptr;
    return kCache + cacheBase + static_cast<int64_t>(h - NUM_HEADS) * BLOCK_SIZE * HEAD_DIM + d;
  };

  const int first = blockIdx.y * THREADS + threadIdx.x;
  const int stride = gridDim.y * THREADS;
  for (int item = first; item < kRotatedHeads * kHalf; item += stride) {
    const int h = item / kHalf;
    const int i = item % kHalf;
    T *out = target(h, i);
    if (!out)
      continue;
    const float x0 = toFloat<T>(row[h * HEAD_DIM + i]);
    const float x1 = toFloat<T>(row[h * HEAD_DIM + i + kHalf]);
    const float c = cosines[i];
    const float s = sines[i];
    out[0] = fromFloat<T>(x0 * c + (-x1) * s);
    out[kHalf] = fromFloat<T>(x1 * c + x0 * s);
  }
  for (int item = first; item < kRotatedHeads * kPass; item += stride) {
    const int h = item / (kPass > 0 ? kPass : 1);
    const int d = ROTARY_DIM + item % (kPass > 0 ? kPass : 1);
    if (T *out = target(h, d))
      *out = row[h * HEAD_DIM + d];
  }
  if (!cached)
    return;
  const T *v = row + (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM;
  for (int item = first; item < NUM_KV_HEADS * HEAD_DIM; item += stride) {
    const int h = item / HEAD_DIM;
    const int d = item % HEAD_DIM;
    vCache[cacheBase + static_cast<int64_t>(h) * BLOCK_SIZE * HEAD_DIM + d] = v[item];
  }
}

} // namespace kiln::kernels::cuda
