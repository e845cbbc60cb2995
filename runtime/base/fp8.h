// fp8 E4M3 ("E4M3FN" of the OCP 8-bit floating point spec: 1 sign, 4 exponent bits with bias 7,
// 3 mantissa bits, no infinities, S.1111.111 the only NaN, largest finite 448) <-> fp32, for
// `--kv-dtype fp8`'s cache. Rounding to nearest even; values beyond 448 saturate to +-448 (as
// vLLM's and TensorRT-LLM's fp8 caches convert), NaN stays NaN. Header-only, no dependencies.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln {

inline float f8e4m3ToF32(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exponent = (b >> 3) & 0xF, mantissa = b & 0x7;
  if (exponent == 0xF && mantissa == 0x7)
    return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) // subnormal: mantissa x 2^-9
    return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

inline uint8_t f32ToF8E4M3(float f) {
  if (std::isnan(f))
    return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f)
    return sign | 0x7E;
  if (a < 0x1p-6f) { // subnormal range: steps of 2^-9 (8 steps reach 2^-6, the smallest normal)
    const float steps = std::nearbyint(a * 0x1p9f);
    return sign | static_cast<uint8_t>(steps);
  }
  int exponent;
  const float fraction = std::frexp(a, &exponent); // a = fraction x 2^exponent, [0.5, 1)
  // a = (1 + m / 8) x 2^(exponent - 1): m = round((2 fraction - 1) x 8), exact in fp32.
  float m = std::nearbyint((2.0f * fraction - 1.0f) * 8.0f);
  int e = exponent - 1 + 7;
  if (m == 8.0f) {
    m = 0.0f;
    ++e;
  }
  if (e > 15 || (e == 15 && m == 7.0f)) // above 448 after rounding (448 < a < 464 rounds down)
    return sign | 0x7E;
  return sign | static_cast<uint8_t>(e << 3) | static_cast<uint8_t>(m);
}

} // namespace kiln
