// linear_quant_int8.h's products on the quantized panels (linear_quant.h "Panels") with AMX-INT8,
// which linear_quant.cc runs at the amx level where the CPU has AMX-INT8 and AVX512-VNNI
// (int8PanelsRunAmx): rows in groups of 16, one 32-column block per tile product.
//   A tile: 16 rows x the block's 32 int8 q, read in place from the quantized rows.
//   B tile: 8 rows x 64 bytes, row kk holding each of a panel's 16 outputs' four stored integers
//     of columns 4kk .. 4kk + 3 as signed bytes (Q8 q, Q4 u - 8, Q4M / Q4Z u), built for every
//     panel and block of a task from the panel's bytes with the VNNI file's permute, and kept for
//     the thread's next task when it has the same panels (the next row tile).
//   C tile: 16 rows x 16 outputs of int32: tdpbssd gives each the block's exact sum of q * w.
// A row group runs a panel's blocks in turn on four C tiles (blockTile: tile registers are not
// renamed, so they take turns), each stored and its floats combined kLag blocks later, per block
// and group lane by lane exactly as linear_quant_int8_vnni.cc combines them. The integer sums are
// the same numbers (exact), so the bits are the same, and a row's result does not depend on its
// tile. Where every group is one block (GGUF Q8_0 / Q4_0) the row group's outputs stay in
// registers for the whole row. Rows past the last whole 16 go to the VNNI panels.
// Built like linear_quant_int8_vnni.cc (KILN_TARGET_BEGIN after the includes).
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant_int8.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <vector>

KILN_TARGET_BEGIN(KILN_ISA_AMX_INT8)

namespace kiln::kernels::cpu::linear_quant {
namespace {

#include "kernels/cpu/amx_tiles.inc"

constexpr int32_t kGroupRows = 16;    // a tile's rows
constexpr int32_t kBlockBTiles = 512; // bytes of one block's B tile: 8 rows x 64
// Tiles: C 0-3, A 4-5, B 6-7 (blockTile below).
TileConfig int8TileConfig() {
  TileConfig config;
  for (int t = 0; t < 4; ++t) {
    config.bytesPerRow[t] = 64;
    config.rows[t] = kGroupRows;
  }
  for (int t = 4; t < 6; ++t) {
    config.bytesPerRow[t] = kInt8Block;
    config.rows[t] = kGroupRows;
  }
  for (int t = 6; t < 8; ++t) {
    config.bytesPerRow[t] = 64;
    config.rows[t] = kInt8Block / 4;
  }
  return config;
}

#include "kernels/cpu/int8_panels_avx512.inc"

// The B tiles of every block of one panel into `out` (blocks x 512 bytes).
template <QuantFormat F>
void buildBTiles(const Int8PanelTile &t, const uint8_t *panel, uint8_t *out) {
  const int32_t blocksPerGroup = t.groupSize / kInt8Block;
  for (int32_t g = 0; g < t.layout.groups; ++g) {
    const uint8_t *group = panel + g * t.layout.groupBytes;
    for (int32_t b = 0; b < blocksPerGroup; ++b, out += kBlockBTiles) {
      if constexpr (F == QuantFormat::kQ8) {
        for (int32_t kk = 0; kk < 8; ++kk)
          _mm512_storeu_si512(out + 64 * kk,
                              outputQuads(group + (b * kInt8Block + 4 * kk) * kPanelOutputs));
      } else { // byte row j: column j (low nibble), j + 16 (high)
        const __m512i mask = _mm512_set1_epi8(0x0F);
        const __m512i bias = _mm512_set1_epi8(F == QuantFormat::kQ4 ? 8 : 0);
        for (int32_t j = 0; j < 16; j += 4) {
          const __m512i u = outputQuads(group + b * 256 + j * kPanelOutputs);
          const __m512i low = _mm512_and_si512(u, mask);
          const __m512i high = _mm512_and_si512(_mm512_srli_epi16(u, 4), mask);
          _mm512_storeu_si512(out + 16 * j, _mm512_sub_epi8(low, bias));
          _mm512_storeu_si512(out + 16 * j + 256, _mm512_sub_epi8(high, bias));
        }
      }
    }
  }
}

// One block's product for 16 rows x one panel into `c` ([16][16] int32), on C tile `slot` with
// A tile 4 + slot % 2 and B tile 6 + slot % 2. Tile registers are not renamed: a tile written
// again waits for every earlier instruction that reads it, so four C tiles and two A / B pairs
// take turns, and a C tile is zeroed again only after its store four blocks back.
#define KILN_INT8_BLOCK_TILE(C, A, B)                                                              \
  KILN_TILE_LOAD(A, a, aStride);                                                                   \
  KILN_TILE_LOAD(B, b, 64);                                                                        \
  KILN_TILE_ZERO(C);                                                                               \
  KILN_TILE_DPBSSD(C, A, B);                                                                       \
  KILN_TILE_STORE(C, c, 64)
inline void blockTile(int32_t slot, const int8_t *a, int64_t aStride, const uint8_t *b,
                      int32_t *c) {
  switch (slot) {
  case 0:
    KILN_INT8_BLOCK_TILE(0, 4, 6);
    break;
  case 1:
    KILN_INT8_BLOCK_TILE(1, 5, 7);
    break;
  case 2:
    KILN_INT8_BLOCK_TILE(2, 4, 6);
    break;
  default:
    KILN_INT8_BLOCK_TILE(3, 5, 7);
    break;
  }
}
#undef KILN_INT8_BLOCK_TILE

// Blocks' stored sums are combined kLag blocks after their product is issued, so the vector loads
// do not wait on the tile stores; kBuffers > kLag of them.
constexpr int32_t kLag = 2;
constexpr int32_t kBuffers = 8;

// Row group r0's blocks in turn against B tiles `b`: block `step`'s product is issued into buffer
// step % kBuffers, and its stored sums go to combine(block, sums) kLag blocks later.
template <class Combine>
inline void pipelineBlocks(const Int8PanelTile &t, int32_t r0, const uint8_t *b,
                           Combine &&combine) {
  const int32_t blocks = t.x.cols / kInt8Block;
  const int8_t *a = t.x.bytes + int64_t(r0) * t.x.cols;
  alignas(64) int32_t c[kBuffers][kGroupRows][kPanelOutputs];
  for (int32_t step = 0; step < blocks + kLag; ++step) {
    if (step < blocks)
      blockTile(step % 4, a + step * kInt8Block, t.x.cols, b + step * kBlockBTiles,
                &c[step % kBuffers][0][0]);
    if (step >= kLag)
      combine(step - kLag, c[(step - kLag) % kBuffers]);
  }
}

// Rows [r0, r0 + 16) x panel p of the tile (its B tiles at `b`) into the tile's sums: per block,
// part = fma(float(sum), d, part); per group, the scale (and Q4M / Q4Z offset) as
// linear_quant_int8_vnni.cc does, lane by lane.
template <QuantFormat F>
void amxRowGroup(const Int8PanelTile &t, int32_t r0, int32_t p, const uint8_t *b) {
  const PanelLayout &layout = t.layout;
  const int32_t blocksPerGroup = t.groupSize / kInt8Block;
  const int32_t rowBlocks = t.x.cols / kInt8Block;
  const float *d = t.x.scales + int64_t(r0) * rowBlocks;
  const int32_t *qSums = t.x.sums + int64_t(r0) * rowBlocks;
  const uint8_t *panel = t.panels + p * layout.panelBytes;
  alignas(64) float part[kGroupRows][kPanelOutputs];
  float xs[kGroupRows];
  pipelineBlocks(t, r0, b, [&](int32_t block, const int32_t(*sums)[kPanelOutputs]) {
    const int32_t g = block / blocksPerGroup;
    const bool first = block % blocksPerGroup == 0,
               last = block % blocksPerGroup + 1 == blocksPerGroup;
    __m512 scale = _mm512_setzero_ps(), offset = _mm512_setzero_ps();
    if (last)
      groupScales<F>(panel + g * layout.groupBytes + layout.valueBytes, scale, offset);
    for (int r = 0; r < kGroupRows; ++r) {
      const float dr = d[r * rowBlocks + block];
      if constexpr (hasQuantMins(F))
        xs[r] =
            _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(qSums[r * rowBlocks + block])),
                                       _mm_set_ss(dr), _mm_set_ss(first ? 0.0f : xs[r])));
      const __m512 partial =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[r])), _mm512_set1_ps(dr),
                          first ? _mm512_setzero_ps() : _mm512_load_ps(part[r]));
      if (!last) {
        _mm512_store_ps(part[r], partial);
        continue;
      }
      float *acc = t.sums + (r0 + r) * kPanelSumStride + p * kPanelOutputs;
      __m512 y = g == 0 ? _mm512_mul_ps(partial, scale)
                        : _mm512_fmadd_ps(partial, scale, _mm512_loadu_ps(acc));
      if constexpr (hasQuantMins(F))
        y = _mm512_fmadd_ps(_mm512_set1_ps(xs[r]), offset, y);
      _mm512_storeu_ps(acc, y);
    }
  });
}

// amxRowGroup where every group is one block (GGUF's Q8_0 / Q4_0): the same operations, with
// the 16 rows' outputs in registers for the whole row instead of in the tile's sums.
template <QuantFormat F>
void amxRowGroupOneBlockGroups(const Int8PanelTile &t, int32_t r0, int32_t p, const uint8_t *b) {
  const PanelLayout &layout = t.layout;
  const int32_t rowBlocks = t.x.cols / kInt8Block;
  const float *d = t.x.scales + int64_t(r0) * rowBlocks;
  const int32_t *qSums = t.x.sums + int64_t(r0) * rowBlocks;
  const uint8_t *panel = t.panels + p * layout.panelBytes;
  __m512 y[kGroupRows];
  pipelineBlocks(t, r0, b, [&](int32_t g, const int32_t(*sums)[kPanelOutputs]) {
    __m512 scale, offset = _mm512_setzero_ps();
    groupScales<F>(panel + g * layout.groupBytes + layout.valueBytes, scale, offset);
#pragma GCC unroll 16
    for (int r = 0; r < kGroupRows; ++r) {
      const float dr = d[r * rowBlocks + g];
      const __m512 partial = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[r])),
                                             _mm512_set1_ps(dr), _mm512_setzero_ps());
      y[r] = g == 0 ? _mm512_mul_ps(partial, scale) : _mm512_fmadd_ps(partial, scale, y[r]);
      if constexpr (hasQuantMins(F)) {
        const float xs =
            _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(qSums[r * rowBlocks + g])),
                                       _mm_set_ss(dr), _mm_setzero_ps()));
        y[r] = _mm512_fmadd_ps(_mm512_set1_ps(xs), offset, y[r]);
      }
    }
  });
#pragma GCC unroll 16
  for (int r = 0; r < kGroupRows; ++r)
    _mm512_storeu_ps(t.sums + (r0 + r) * kPanelSumStride + p * kPanelOutputs, y[r]);
}

// A thread's B tiles: built from `count` panels at `panels`, or none (null).
struct BTiles {
  std::vector<uint8_t> bytes;
  const uint8_t *panels = nullptr;
  int32_t count = 0;
};
thread_local BTiles bTiles;

// The tile's whole row groups, each against every panel (the B tiles of all the task's panels
// built first, or kept from the thread's previous tile of the call when it had the same panels):
// a row group's 16 quantized rows stay in L1 while the panels' B tiles stream.
template <QuantFormat F> void amxTile(const Int8PanelTile &t, int32_t groupRows) {
  const int64_t panelBTiles = int64_t(t.x.cols / kInt8Block) * kBlockBTiles;
  if (!t.panelsAsBefore || bTiles.panels != t.panels || bTiles.count != t.panelCount) {
    if (bTiles.bytes.size() < size_t(panelBTiles * t.panelCount))
      bTiles.bytes.resize(size_t(panelBTiles * t.panelCount));
    for (int32_t p = 0; p < t.panelCount; ++p)
      buildBTiles<F>(t, t.panels + p * t.layout.panelBytes, bTiles.bytes.data() + p * panelBTiles);
    bTiles.panels = t.panels;
    bTiles.count = t.panelCount;
  }
  loadTileConfig(int8TileConfig());
  for (int32_t r = 0; r < groupRows; r += kGroupRows)
    for (int32_t p = 0; p < t.panelCount; ++p)
      (t.groupSize == kInt8Block ? amxRowGroupOneBlockGroups<F>
                                 : amxRowGroup<F>)(t, r, p, bTiles.bytes.data() + p * panelBTiles);
  endTiles();
}

} // namespace

void panelTileInt8Amx(const Int8PanelTile &tile) {
  const int32_t groupRows = tile.rows / kGroupRows * kGroupRows;
  if (groupRows == 0) {
    bTiles.panels = nullptr; // kept B tiles are only ever reused by the next tile of a call
    return panelTileInt8Vnni(tile);
  }
  switch (tile.format) {
  case QuantFormat::kQ8:
    amxTile<QuantFormat::kQ8>(tile, groupRows);
    break;
  case QuantFormat::kQ4:
    amxTile<QuantFormat::kQ4>(tile, groupRows);
    break;
  case QuantFormat::kQ4Min:
    amxTile<QuantFormat::kQ4Min>(tile, groupRows);
    break;
  case QuantFormat::kQ4Zero:
    amxTile<QuantFormat::kQ4Zero>(tile, groupRows);
    break;
  default: // fp8 formats keep fp32 rows (linear_quant_int8.h)
    return;
  }
  if (groupRows == tile.rows)
    return;
  // The last rows (fewer than 16) on the VNNI panels: the same bits.
  const int32_t rowBlocks = tile.x.cols / kInt8Block;
  Int8PanelTile rest = tile;
  rest.rows = tile.rows - groupRows;
  rest.x.q += int64_t(groupRows) * tile.x.cols;
  rest.x.bytes += int64_t(groupRows) * tile.x.cols;
  rest.x.scales += int64_t(groupRows) * rowBlocks;
  rest.x.sums += int64_t(groupRows) * rowBlocks;
  rest.sums += int64_t(groupRows) * kPanelSumStride;
  panelTileInt8Vnni(rest);
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
