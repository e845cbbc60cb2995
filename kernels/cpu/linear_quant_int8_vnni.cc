// linear_quant_int8.h's products on the quantized panels (linear_quant.h "Panels") with AVX-512
// VNNI, which linear_quant.cc runs from the avx512 level up where the CPU has AVX512-VNNI and
// AVX512-VBMI (cpuHasAvx512Vnni, cpu_isa.h); the rows are quantized by the avx2 code. A panel's
// 16 outputs are one register of 16 int32 lanes. Four columns at a time: one 64-byte load takes
// the panel's 16 bytes of each of four columns (or, for the 4-bit formats, four byte rows, whose
// low nibbles are four columns and whose high nibbles four more), a byte permute puts each
// output's four bytes in its own lane, and one _mm512_dpbusd_epi32 per row multiplies them as
// unsigned bytes by the row's four int8 q (broadcast) and adds the four products to the lane.
// dpbusd's first operand is unsigned: Q8's signed weights go in as w + 128 (the top bit flipped),
// and the block's sum comes out as sum(q * (w + 128)) - 128 * sum(q); Q4's as the nibble u, less
// 8 * sum(q) (Q4M and Q4Z take u as it is). Every integer sum is exact, so the blocks' sums equal
// linear_quant_int8_avx2.cc's, and the floats are combined per block and group exactly as the rule
// says, lane by lane: both files give the same bits, and a row's bits do not depend on its tile.
// Built like linear_quant_int8_avx2.cc (KILN_TARGET_BEGIN after the includes).
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/linear_quant_int8.h"

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

KILN_TARGET_BEGIN(KILN_ISA_AVX512_VNNI)

namespace kiln::kernels::cpu::linear_quant {
namespace {

#include "kernels/cpu/count_dispatch.inc"

constexpr int64_t kPrefetchBytes = 2048;

// Four int8 of a row (columns k .. k + 3) in every 32-bit lane.
inline __m512i quadOf(const int8_t *q) {
  int32_t quad;
  std::memcpy(&quad, q, 4);
  return _mm512_set1_epi32(quad);
}

#include "kernels/cpu/int8_panels_avx512.inc"

// The integer sums of one block: R rows x P panels.
template <int R, int P> struct BlockSums {
  __m512i v[R][P];
  void clear() {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        v[r][p] = _mm512_setzero_si512();
  }
  // Adds every row's four q at `q` (rows `cols` apart) times panel p's unsigned quads `w`.
  void add(const int8_t *q, int32_t cols, int p, __m512i w) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      v[r][p] = _mm512_dpbusd_epi32(v[r][p], w, quadOf(q + int64_t(r) * cols));
  }
};

// Block b of the group: Q8 columns 32b.. of [column][output] bytes; the 4-bit formats their run b,
// byte row j holding column j (low nibble) and j + 16 (high). `q`: the rows' block.
template <int R, int P, QuantFormat F>
inline void addBlock(const Int8PanelTile &t, const uint8_t *group, int32_t b, const int8_t *q,
                     BlockSums<R, P> &sums) {
  if constexpr (F == QuantFormat::kQ8) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int32_t k = 0; k < kInt8Block; k += 4)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const uint8_t *bytes =
            group + p * t.layout.panelBytes + (b * kInt8Block + k) * kPanelOutputs;
        _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
        sums.add(q + k, t.x.cols, p, _mm512_xor_si512(outputQuads(bytes), flip));
      }
  } else {
    const __m512i mask = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int32_t j = 0; j < 16; j += 4)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const uint8_t *bytes = group + p * t.layout.panelBytes + b * 256 + j * kPanelOutputs;
        _mm_prefetch(reinterpret_cast<const char *>(bytes + kPrefetchBytes), _MM_HINT_T0);
        const __m512i u = outputQuads(bytes);
        sums.add(q + j, t.x.cols, p, _mm512_and_si512(u, mask));
        sums.add(q + 16 + j, t.x.cols, p, _mm512_and_si512(_mm512_srli_epi16(u, 4), mask));
      }
  }
}

// Rows [r0, r0 + R) x panels [p0, p0 + P) of the tile into its sums.
template <int R, int P, QuantFormat F>
void vnniMicro(const Int8PanelTile &t, int32_t r0, int32_t p0) {
  const PanelLayout &layout = t.layout;
  const int32_t blocksPerGroup = t.groupSize / kInt8Block;
  const int32_t rowBlocks = t.x.cols / kInt8Block;
  const int8_t *q = t.x.bytes + int64_t(r0) * t.x.cols;
  const float *d = t.x.scales + int64_t(r0) * rowBlocks;
  const int32_t *qSums = t.x.sums + int64_t(r0) * rowBlocks;
  // What a block's sum over-counts per unit of the row's sum of q: Q8 128, Q4 8, else 0.
  constexpr int32_t kBias = F == QuantFormat::kQ8 ? 128 : F == QuantFormat::kQ4 ? 8 : 0;
  for (int32_t g = 0; g < layout.groups; ++g) {
    const uint8_t *group = t.panels + p0 * layout.panelBytes + g * layout.groupBytes;
    __m512 part[R][P];
    float xs[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      xs[r] = 0.0f;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        part[r][p] = _mm512_setzero_ps();
    }
    for (int32_t b = 0; b < blocksPerGroup; ++b) {
      const int32_t block = g * blocksPerGroup + b;
      BlockSums<R, P> sums;
      sums.clear();
      addBlock<R, P, F>(t, group, b, q + block * kInt8Block, sums);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int32_t qSum = qSums[r * rowBlocks + block];
        const float dr = d[r * rowBlocks + block];
        const __m512i bias = _mm512_set1_epi32(kBias * qSum);
        const __m512 scale = _mm512_set1_ps(dr);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const __m512i exact = kBias != 0 ? _mm512_sub_epi32(sums.v[r][p], bias) : sums.v[r][p];
          part[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), scale, part[r][p]);
        }
        if constexpr (hasQuantMins(F))
          xs[r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(qSum)), _mm_set_ss(dr),
                                             _mm_set_ss(xs[r])));
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      __m512 scale, offset = _mm512_setzero_ps();
      groupScales<F>(group + p * layout.panelBytes + layout.valueBytes, scale, offset);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        float *acc = t.sums + (r0 + r) * kPanelSumStride + (p0 + p) * kPanelOutputs;
        __m512 y = g == 0 ? _mm512_mul_ps(part[r][p], scale)
                          : _mm512_fmadd_ps(part[r][p], scale, _mm512_loadu_ps(acc));
        if constexpr (hasQuantMins(F))
          y = _mm512_fmadd_ps(_mm512_set1_ps(xs[r]), offset, y);
        _mm512_storeu_ps(acc, y);
      }
    }
  }
}

// Micro-kernels of up to 6 rows: fewer rows take more panels at once.
template <QuantFormat F> void vnniTile(const Int8PanelTile &t) {
  forRowGroups<6>(t.rows, [&](auto n, int32_t r) {
    constexpr int kPanels = n() == 1 ? 4 : n() <= 3 ? 2 : 1;
    forChunks<kPanels>(t.panelCount,
                       [&](auto panels, int32_t p0) { vnniMicro<n(), panels(), F>(t, r, p0); });
  });
}

} // namespace

void panelTileInt8Vnni(const Int8PanelTile &tile) {
  switch (tile.format) {
  case QuantFormat::kQ8:
    return vnniTile<QuantFormat::kQ8>(tile);
  case QuantFormat::kQ4:
    return vnniTile<QuantFormat::kQ4>(tile);
  case QuantFormat::kQ4Min:
    return vnniTile<QuantFormat::kQ4Min>(tile);
  case QuantFormat::kQ4Zero:
    return vnniTile<QuantFormat::kQ4Zero>(tile);
  default: // fp8 formats keep fp32 rows (linear_quant_int8.h)
    return;
  }
}

} // namespace kiln::kernels::cpu::linear_quant

KILN_TARGET_END
