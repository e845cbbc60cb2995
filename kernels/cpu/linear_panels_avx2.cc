// Linear with fp32, bf16 or fp16 weights in panels of 16 outputs on AVX2 + FMA (CpuIsa::kAvx2):
// linear_panels_impl.inc at 8 lanes, micro-kernels of up to 12 accumulators in AVX2's 16
// registers (6 rows x 1 panel, the shape of BLIS's Haswell kernel): 12 fused multiply-adds for 8
// loads, where the 8-lane tiles of linear_avx2.cc reach 6 for 5 and add lanes at the end. A task of
// many rows covers 4 panels (64 outputs, as AVX-512's 2): each row group's x is read from L1 by
// the 4 panels' micro-kernels in turn, and x comes from L2 once per 64 outputs, not per 16.
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_panels.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <utility>
#include <vector>

KILN_TARGET_BEGIN(KILN_ISA_AVX2_F16C)

namespace kiln::kernels::cpu {
namespace {

constexpr int32_t kLanes = 8;
constexpr int kAccumulators = 12;
constexpr int32_t kManyRowPanels = 4;
using Vec = __m256;
inline Vec zeroVec() {
  return _mm256_setzero_ps();
}
inline Vec loadVec(const float *p) {
  return _mm256_loadu_ps(p);
}
inline void storeVec(float *p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline Vec broadcastVec(float x) {
  return _mm256_set1_ps(x);
}
inline Vec addVec(Vec a, Vec b) {
  return _mm256_add_ps(a, b);
}
inline Vec fmaddVec(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline Vec loadF16Vec(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
inline Vec loadBf16Vec(const uint16_t *p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

#include "kernels/cpu/linear_panels_impl.inc"

} // namespace

size_t packedPanelBytesAvx2(WeightType type, int32_t outFeatures, int32_t inFeatures) {
  return packedBytes(type, outFeatures, inFeatures);
}
void packPanelsAvx2(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                    void *packed) {
  pack(weight, type, outFeatures, inFeatures, packed);
}
void linearPanelsAvx2(const LinearArgs &args) {
  run(args);
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
