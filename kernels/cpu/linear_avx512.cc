// Linear tiles for AVX-512 (F, BW, VL, DQ): 16 fp32 lanes, one fused multiply-add per product.
// Built like linear_avx2.cc: only this file's own functions target AVX-512 (KILN_TARGET_BEGIN
// (isa_target.h) after the includes, everything in an anonymous namespace), and linear.cc calls
// tileAvx512 only when the CPU has all four extensions.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_tile.h"
#include "kernels/cpu/weight_convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <utility>

KILN_TARGET_BEGIN(KILN_ISA_AVX512)

namespace kiln::kernels::cpu::linear_tile {
namespace {

#define KILN_LINEAR_LANES 16
using V = float __attribute__((vector_size(4 * KILN_LINEAR_LANES)));
inline V madd(V acc, V x, V w) {
  return _mm512_fmadd_ps(x, w, acc);
}

#include "kernels/cpu/linear_impl.inc"
#undef KILN_LINEAR_LANES

} // namespace

void tileAvx512(const LinearArgs &args, const Tile &tile, float *scratch) {
  runTile(args, tile, scratch);
}

} // namespace kiln::kernels::cpu::linear_tile

KILN_TARGET_END
