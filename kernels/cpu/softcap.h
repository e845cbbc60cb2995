// Gemma 2's soft-capping of one value, s -> tanh(s / c) * c, as transformers computes it (divide,
// tanh, multiply): the attention scores' (attention.cc) and the final logits' (elementwise.cc).
#pragma once

#include <cmath>

namespace kiln::kernels::cpu {

inline float softcapValue(float s, float cap) {
  return std::tanh(s / cap) * cap;
}

} // namespace kiln::kernels::cpu
