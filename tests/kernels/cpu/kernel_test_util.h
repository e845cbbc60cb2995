// Shared by the CPU kernel tests: seeded random data and weights stored as fp32/fp16/bf16 together
// with the exact fp32 values they hold (what the double-precision references read).
#pragma once

#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace kiln::kernels::cpu::testing {

inline std::vector<float> randomFloats(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
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

} // namespace kiln::kernels::cpu::testing
