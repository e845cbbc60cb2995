// Internal to kiln_cpu_kernels: the vector loops of CPU attention (attention.cc) at each
// instruction-set level, like the Linear tiles (linear_tile.h): attention_chunk_sse2.cc (4 lanes,
// separate multiply and add), attention_chunk_avx2.cc (8 lanes, FMA) and attention_chunk_avx512.cc
// (16 lanes, FMA), all built from attention_chunk.inc. The level fixes the summation order of a dot
// product, so results differ between levels (each within the attention tests' tolerance) but not
// between batches at one level.
#pragma once

#include "kernels/cpu/cpu_isa.h"

#include <cstdint>

namespace kiln::kernels::cpu::attention_chunk {

struct ChunkKernels {
  // scores[j] = dot(q, keys[j]) * scale for j in [0, n), keys headDim apart.
  void (*score)(const float *q, const float *keys, int32_t n, int32_t headDim, float scale,
                float *scores);
  // scores[j] = e^(scores[j] - max) for j in [0, n).
  void (*exponentiate)(float *scores, int32_t n, float max);
  // acc[d] += p[j] * values[j][d] for j in [0, n), in increasing j for every d.
  void (*accumulate)(const float *p, const float *values, int32_t n, int32_t headDim, float *acc);
};

ChunkKernels chunkKernelsSse2();
ChunkKernels chunkKernelsAvx2();
ChunkKernels chunkKernelsAvx512();

// The kernels of `isa` (every AVX-512 level runs the AVX-512 ones).
inline ChunkKernels chunkKernelsFor(CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512)
    return chunkKernelsAvx512();
  return isa == CpuIsa::kSse2 ? chunkKernelsSse2() : chunkKernelsAvx2();
}

} // namespace kiln::kernels::cpu::attention_chunk
