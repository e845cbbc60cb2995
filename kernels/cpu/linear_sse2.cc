// Linear tiles at the x86-64 baseline: 4 fp32 lanes, separate multiply and add (no FMA).
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/linear_tile.h"
#include "kernels/cpu/weight_convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace kiln::kernels::cpu::linear_tile {
namespace {

#define KILN_LINEAR_LANES 4
using V = float __attribute__((vector_size(4 * KILN_LINEAR_LANES)));
inline V madd(V acc, V x, V w) {
  return acc + x * w;
}

#include "kernels/cpu/linear_impl.inc"
#undef KILN_LINEAR_LANES

} // namespace

void tileSse2(const LinearArgs &args, const Tile &tile, float *scratch) {
  runTile(args, tile, scratch);
}

} // namespace kiln::kernels::cpu::linear_tile
