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
constexpr int32_t kXBufferFloats = std::max(kRowTile * kKBlock, kStreamingRows *kStreamChunk);
// One thread's scratch: the accumulator tile at the widest lanes, a widened weight tile and the
// widened x, plus room to align the start to 64 bytes.
constexpr int32_t kAccFloats = kRowTile * kOutTile * kMaxLanes;
constexpr int32_t kScratchFloats = 16 + kAccFloats + kOutTile * kKBlock + kXBufferFloats;

// x that the tiles cannot read in place (bf16 weights: pair order; half x: widened), converted
// row tile by row tile over all of k and kept by each worker for the length of one Linear call
// (linear.cc): a worker converts each row tile's x the first time it runs one of its tiles, and
// its other tiles of that row tile (one per kOutTile outputs) read it, instead of converting
// their own. `data` null: x is read in place, or the call's x is too large to keep
// (kMaxCachedXFloats), and each tile converts the k-blocks it reads.
struct XCache {
  float *data = nullptr;  // every row of the call, cachedXStride() floats apart
  uint64_t converted = 0; // bit t: row tile t is in `data`
};
// A worker's cache holds at most this many floats (4 MiB), of at most 64 row tiles.
constexpr int64_t kMaxCachedXFloats = int64_t(1) << 20;
constexpr int32_t kMaxCachedRowTiles = 64;
// Columns of one cached row: a whole number of every ISA level's pair blocks (2 x 16 lanes), the
// padding zeros.
inline int64_t cachedXStride(int32_t inFeatures) {
  return (int64_t(inFeatures) + 31) / 32 * 32;
}

struct Tile {
  int32_t row0, rows, out0, outs;
  XCache *xCache = nullptr; // this worker's, never null when `data` is set
};

// Computes and stores the outputs of one tile; `scratch` holds kScratchFloats floats.
using TileFn = void (*)(const LinearArgs &args, const Tile &tile, float *scratch);
void tileSse2(const LinearArgs &args, const Tile &tile, float *scratch);
void tileAvx2(const LinearArgs &args, const Tile &tile, float *scratch);
void tileAvx512(const LinearArgs &args, const Tile &tile, float *scratch);

} // namespace kiln::kernels::cpu::linear_tile
