// Internal to kiln_cpu_kernels: the Linear kernel's tiling, shared by the dispatcher (linear.cc,
// which runs the OpenMP loop over tiles) and the per-ISA tile code (linear_<isa>.cc, each built
// from linear_impl.inc for one vector width).
#pragma once

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cstdint>

namespace kiln::kernels::cpu::linear_tile {

// Rows x outputs handled by one task; the weight tile (kOutTile rows x kKBlock) stays in L1 while
// it is reused by every row of the row tile.
constexpr int32_t kRowTile = 64;
constexpr int32_t kOutTile = 16;
constexpr int32_t kKBlock = 256; // a multiple of every lane count, so lanes line up across blocks
// Up to this many rows a tile streams whole weight rows instead of blocking over k.
constexpr int32_t kStreamingRows = 8;
// Half x with few rows: k is cut into chunks this long (a multiple of the lanes), each widened
// once.
constexpr int32_t kStreamChunk = 1024;
constexpr int32_t kMaxLanes = 16;
constexpr int32_t kXBufferFloats = std::max(kRowTile * kKBlock, kStreamingRows * kStreamChunk);
// One thread's scratch: the accumulator tile at the widest lanes, a widened weight tile and the
// widened x, plus room to align the start to 64 bytes.
constexpr int32_t kAccFloats = kRowTile * kOutTile * kMaxLanes;
constexpr int32_t kScratchFloats = 16 + kAccFloats + kOutTile * kKBlock + kXBufferFloats;

struct Tile {
  int32_t row0, rows, out0, outs;
};

// Computes and stores the outputs of one tile; `scratch` holds kScratchFloats floats.
using TileFn = void (*)(const LinearArgs &args, const Tile &tile, float *scratch);
void tileSse2(const LinearArgs &args, const Tile &tile, float *scratch);
void tileAvx2(const LinearArgs &args, const Tile &tile, float *scratch);
void tileAvx512(const LinearArgs &args, const Tile &tile, float *scratch);

} // namespace kiln::kernels::cpu::linear_tile
