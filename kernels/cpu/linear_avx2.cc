// Linear tiles for AVX2 + FMA: 8 fp32 lanes, one fused multiply-add per product. Only this file's
// own functions are built for AVX2 (`#pragma GCC target` after the includes, everything in an
// anonymous namespace): a -mavx2 translation unit would also compile the inline functions of the
// headers it includes for AVX2, and the linker may keep that copy for every caller, so a CPU
// without AVX2 could execute it. linear.cc calls tileAvx2 only when the CPU has AVX2 and FMA.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/linear_tile.h"
#include "kernels/cpu/weight_convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <utility>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
// clang ignores `#pragma GCC target` (scripts/fuzz.sh builds with clang): the same target,
// given to every function declared until the pop below.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif

namespace kiln::kernels::cpu::linear_tile {
namespace {

#define KILN_LINEAR_LANES 8
using V = float __attribute__((vector_size(4 * KILN_LINEAR_LANES)));
inline V madd(V acc, V x, V w) {
  return _mm256_fmadd_ps(x, w, acc);
}

#include "kernels/cpu/linear_impl.inc"
#undef KILN_LINEAR_LANES

} // namespace

void tileAvx2(const LinearArgs &args, const Tile &tile, float *scratch) {
  runTile(args, tile, scratch);
}

} // namespace kiln::kernels::cpu::linear_tile

#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC pop_options
