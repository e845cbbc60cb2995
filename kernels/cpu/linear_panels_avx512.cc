// Linear with fp32, bf16 or fp16 weights in panels of 32 outputs on AVX-512 (CpuIsa::kAvx512 and
// above): linear_panels_impl.inc at 16 lanes, micro-kernels of up to 24 accumulators (6 rows x 4
// vectors for many rows, 12 rows x 2 vectors for few): 24 fused multiply-adds for 10 loads.
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

KILN_TARGET_BEGIN(KILN_ISA_AVX512_F16C)

namespace kiln::kernels::cpu {
namespace {

constexpr int32_t kLanes = 16;
constexpr int kAccumulators = 24;
constexpr int32_t kManyRowPanels = 2;
using Vec = __m512;
inline Vec zeroVec() {
  return _mm512_setzero_ps();
}
inline Vec loadVec(const float *p) {
  return _mm512_loadu_ps(p);
}
inline void storeVec(float *p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline Vec broadcastVec(float x) {
  return _mm512_set1_ps(x);
}
inline Vec addVec(Vec a, Vec b) {
  return _mm512_add_ps(a, b);
}
inline Vec fmaddVec(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline Vec loadF16Vec(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
inline Vec loadBf16Vec(const uint16_t *p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

#include "kernels/cpu/linear_panels_impl.inc"

} // namespace

size_t packedPanelBytesAvx512(WeightType type, int32_t outFeatures, int32_t inFeatures) {
  return packedBytes(type, outFeatures, inFeatures);
}
void packPanelsAvx512(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                      void *packed) {
  pack(weight, type, outFeatures, inFeatures, packed);
}
void linearPanelsAvx512(const LinearArgs &args) {
  run(args);
}

} // namespace kiln::kernels::cpu

KILN_TARGET_END
