// Internal to kiln_cpu_kernels: e^x on 4 fp32 lanes at the x86-64 baseline (SSE2), for SiLU,
// where one scalar std::exp per element bounded the loop. (Attention's softmax weights measured
// no faster with it and keep std::exp.)
#pragma once

#include "kernels/cpu/vector4.h"

#include <cstdint>

namespace kiln::kernels::cpu {

// e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2 (|r| <= ln 2 / 2, ln 2 in two parts so
// n times the first is exact), e^r by its Taylor series up to r^7 (truncation below 6e-9
// relative) and 2^n as two powers of two put in exponent bits. Within 2 ulp of std::exp where the
// result is a normal float (tests/kernels/cpu/vector_exp_test.cc); x > 88.72283 gives +inf,
// x < -87.3365 (results that would be subnormal) gives 0, NaN gives NaN. Each lane is computed on
// its own: an input gives the same output in any lane of any call.
inline F32x4 expF32x4(F32x4 x) {
  constexpr float kMaxInput = 88.72283172607421875f; // largest x with a finite e^x
  constexpr float kMinInput = -87.33654022216797f;   // e^x below this is subnormal
  constexpr float kRound = 12582912.0f;              // 1.5 x 2^23: adding it rounds to an integer
  const F32x4 lo = F32x4{} + kMinInput, hi = F32x4{} + kMaxInput;
  const F32x4 clamped = x < lo ? lo : (x > hi ? hi : x);
  const F32x4 n = (clamped * 1.44269504088896341f + kRound) - kRound;
  const F32x4 r = (clamped - n * 0.693359375f) - n * -2.12194440054690583e-4f;
  F32x4 p = r * (1.0f / 5040) + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I32x4 exponent = __builtin_convertvector(n, I32x4);
  const I32x4 half = exponent >> 1;
  const F32x4 scale1 = (F32x4)((half + 127) << 23);
  const F32x4 scale2 = (F32x4)((exponent - half + 127) << 23);
  F32x4 result = p * scale1 * scale2;
  result = x > hi ? F32x4{} + __builtin_huge_valf() : result;
  result = x < lo ? F32x4{} : result;
  return x != x ? x : result; // NaN in, NaN out
}

} // namespace kiln::kernels::cpu
