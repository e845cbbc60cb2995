// Attention's vector loops at the x86-64 baseline: 4 fp32 lanes, separate multiply and add.
#include "kernels/cpu/attention_chunk.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::kernels::cpu::attention_chunk {
namespace {

#define KILN_ATTENTION_LANES 4
using V = float __attribute__((vector_size(4 * KILN_ATTENTION_LANES)));
inline V madd(V acc, V x, V w) {
  return acc + x * w;
}

#include "kernels/cpu/attention_chunk.inc"
#undef KILN_ATTENTION_LANES

} // namespace

ChunkKernels chunkKernelsSse2() {
  return {&scoreChunk, &exponentiate, &accumulateValues};
}

} // namespace kiln::kernels::cpu::attention_chunk
