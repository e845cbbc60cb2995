// Device-side test data for the GPU benchmark tools (roofline.cu, gemv_sweep.cu): uniform values
// in [-scale, scale) from a per-element hash, cheap to make and nothing like zeros (tensor cores
// and GEMVs run faster on zeros than on real data).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

namespace kiln::tools {

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
