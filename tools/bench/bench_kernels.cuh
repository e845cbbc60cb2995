// Kernels the GPU benchmark tools share (roofline.cu, gemv_sweep.cu): the read-only bandwidth
// probe and their test data.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

namespace kiln::tools {

// Four independent 16-byte loads in flight per thread per iteration. The store is conditional on
// the loaded data, so the compiler must keep every load; it practically never happens.
static __global__ void readReduce(const uint4 *__restrict__ data, size_t count, unsigned *sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride],
                d = data[i + 3 * stride];
    acc += a.x ^ b.y ^ c.z ^ d.w;
    acc += a.w ^ b.x ^ c.y ^ d.z;
  }
  for (; i < count; i += stride)
    acc += data[i].x ^ data[i].w;
  if (acc == 0x9e3779b9u)
    *sink = acc;
}

// Uniform values in [-scale, scale) from a per-element hash, cheap to make and nothing like zeros
// (tensor cores and GEMVs run faster on zeros than on real data).
static __global__ void fillBf16(__nv_bfloat16 *data, size_t count, unsigned seed,
                                float scale = 1.0f) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 0x9e3779b1u ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    data[i] = __float2bfloat16(scale * (float(h >> 8) * (2.0f / 16777216.0f) - 1.0f));
  }
}

} // namespace kiln::tools
