// Shared by the CPU kernel tests: seeded random data and weights stored as fp32/fp16/bf16 together
// with the exact fp32 values they hold (what the double-precision references read).
#pragma once

#include "kernels/cpu/kernels.h"
#include "runtime/base/fp8.h"
#include "runtime/base/half.h"
#include "runtime/base/quant_layout.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace kiln::kernels::cpu::testing {

inline std::vector<float> randomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

inline const char *weightTypeName(WeightType type) {
  switch (type) {
  case WeightType::kF32:
    return "f32";
  case WeightType::kF16:
    return "f16";
  case WeightType::kBF16:
    return "bf16";
  }
  return "?";
}

// A weight tensor in one storage type; `values` are the fp32 numbers it actually represents.
struct TypedWeights {
  WeightType type;
  std::vector<float> values;
  std::vector<uint16_t> halves; // fp16/bf16 storage
  const void *data() const {
    return type == WeightType::kF32 ? static_cast<const void *>(values.data())
                                    : static_cast<const void *>(halves.data());
  }
};

inline TypedWeights makeWeights(const std::vector<float> &source, WeightType type) {
  TypedWeights w{type, source, {}};
  if (type == WeightType::kF32)
    return w;
  w.halves.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (type == WeightType::kF16) {
      w.halves[i] = f32ToF16(source[i]);
      w.values[i] = f16ToF32(w.halves[i]);
    } else {
      w.halves[i] = f32ToBf16(source[i]);
      w.values[i] = bf16ToF32(w.halves[i]);
    }
  }
  return w;
}

inline bool bitwiseEqual(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A quantized [rows, cols] matrix: its bytes and the fp32 weights they stand for.
struct QuantMatrixBytes {
  QuantWeight quant;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

// Each group's scale and min (drawGroup, rounded to fp16 here, except Q8F32's fp32 scale; Q4Z: the
// zero point, 0..15) and
// each stored value (drawValue: Q8 -128..127, 4-bit 0..15) written in the layout, and the weights
// they stand for.
struct GroupParams {
  float scale, min;
  int zero = 0;
};
template <class DrawGroup, class DrawValue>
inline QuantMatrixBytes writeQuantized(QuantFormat format, int32_t rows, int32_t cols,
                                       int32_t groupSize, uint32_t seed, DrawGroup drawGroup,
                                       DrawValue drawValue) {
  std::mt19937 rng(seed);
  const QuantLayout layout = quantLayout(format, rows, cols, groupSize);
  QuantMatrixBytes m{{format, groupSize}, std::vector<uint8_t>(layout.totalBytes, 0xAB), {}};
  m.values.resize(size_t(rows) * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < layout.groupsPerRow; ++g) {
      const GroupParams params = drawGroup(rng);
      const uint16_t scaleBits = f32ToF16(params.scale);
      const uint16_t minBits =
          format == QuantFormat::kQ4Zero ? uint16_t(params.zero) : f32ToF16(params.min);
      const int64_t slot = r * layout.groupsPerRow + g;
      const bool wide = format == QuantFormat::kQ8FloatF32;
      if (wide)
        std::memcpy(&m.bytes[layout.scalesOffset + 4 * slot], &params.scale, 4);
      else
        std::memcpy(&m.bytes[layout.scalesOffset + 2 * slot], &scaleBits, 2);
      if (hasQuantMins(format))
        std::memcpy(&m.bytes[layout.minsOffset + 2 * slot], &minBits, 2);
      const float scale = wide ? params.scale : f16ToF32(scaleBits), min = f16ToF32(minBits);
      for (int64_t c = g * groupSize; c < (g + 1) * groupSize; ++c) {
        const int q = drawValue(rng);
        float &value = m.values[r * cols + c];
        if (format == QuantFormat::kQ8) {
          m.bytes[r * cols + c] = static_cast<uint8_t>(static_cast<int8_t>(q));
          value = scale * float(q);
          continue;
        }
        if (isFp8Quant(format)) { // q's byte as an E4M3 code, NaN codes moved by one
          uint8_t code = static_cast<uint8_t>(static_cast<int8_t>(q));
          if ((code & 0x7F) == 0x7F)
            code ^= 1;
          m.bytes[r * cols + c] = code;
          value = scale * f8e4m3ToF32(code);
          continue;
        }
        // Run of 32 values in 16 bytes: value i low nibble of byte i, value i + 16 the high one.
        const int64_t within = c % 32;
        uint8_t &byte = m.bytes[(r * cols + c - within) / 2 + within % 16];
        byte = within < 16 ? uint8_t((byte & 0xF0) | q) : uint8_t((byte & 0x0F) | (q << 4));
        // Q4Z: a zero weight is +0 (runtime/base/quant_layout.h), whatever the scale's sign.
        value = format == QuantFormat::kQ4       ? scale * float(q - 8)
                : format == QuantFormat::kQ4Zero ? scale * float(q - params.zero) + 0.0f
                                                 : std::fma(scale, float(q), min);
      }
    }
  return m;
}

// Scales of either sign around 2^-6, mins in [-0.1, 0.1], values uniform.
inline QuantMatrixBytes randomQuantized(QuantFormat format, int32_t rows, int32_t cols,
                                        int32_t groupSize, uint32_t seed) {
  const auto drawGroup = [](std::mt19937 &rng) {
    std::uniform_real_distribution<float> scale(0.5f, 2.0f), min(-0.1f, 0.1f);
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    return GroupParams{sign * scale(rng) * 0x1p-6f, min(rng), int(rng() % 16)};
  };
  const auto drawValue = [format](std::mt19937 &rng) {
    return isByteQuant(format) ? int(rng() % 256) - 128 : int(rng() % 16);
  };
  return writeQuantized(format, rows, cols, groupSize, seed, drawGroup, drawValue);
}

} // namespace kiln::kernels::cpu::testing
