// Linear tiles for AVX2 + FMA: 8 fp32 lanes, one fused multiply-add per product. Only this file's
// own functions are built for AVX2 (KILN_TARGET_BEGIN after the includes, everything in an
// anonymous namespace): a -mavx2 translation unit would also compile the inline functions of the
// headers it includes for AVX2, and the linker may keep that copy for every caller, so a CPU
// without AVX2 could execute it. linear.cc calls tileAvx2 only when the CPU has AVX2 and FMA.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_tile.h"
#include "kernels/cpu/weight_convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <utility>

KILN_TARGET_BEGIN(KILN_ISA_AVX2)

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

KILN_TARGET_END
