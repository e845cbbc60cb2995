// Internal to kiln_cpu_kernels: the cosines and sines of a token's rotary angles on 8 lanes of
// double (rope_angles_avx512.cc) or 4 (rope_angles_avx2.cc, the same operations), which rope_kv.cc
// takes from the avx2 level up instead of a std::cos and a std::sin call per angle (most of a
// prefill's RopeKvWrite). Both give the same bits. Each result is the
// double-precision value (angle reduced by pi/2 in three parts, Taylor series to 1e-16) rounded to
// fp32 once: the correctly rounded cosine and sine but in the rarest ties (tests/kernels/cpu/
// rope_kv_test.cc sweeps the angles of 32k positions). glibc's cosf and sinf, which the lower
// level (sse2) calls, are within an ulp of those, not always equal, so a rotation's last bits may
// differ between sse2 and the levels above.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

// cosines[i] = cos(angles[i]), sines[i] = sin(angles[i]) for i < n; finite angles. `cosines` may
// be `angles` (in place).
void cosSinAvx512(const float *angles, int32_t n, float *cosines, float *sines);
void cosSinAvx2(const float *angles, int32_t n, float *cosines, float *sines);

} // namespace kiln::kernels::cpu
