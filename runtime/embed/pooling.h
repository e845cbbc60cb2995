// One vector per sequence from its hidden states, as sentence-transformers' Pooling and Normalize
// modules compute it (the plan's ModelInfo.pooling / normalize_embeddings, read at compile time
// from modules.json and 1_Pooling/config.json). Every token of a sequence counts (no padding here:
// sequences are packed, each exactly its own tokens).
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

enum class PoolingMode : uint8_t { kNone, kCls, kMean, kMax, kLastToken };

// "cls", "mean", "max", "lasttoken"; "" is kNone. An error names an unknown one.
Result<PoolingMode> parsePoolingMode(std::string_view name);
std::string poolingModeName(PoolingMode mode);

// rows: [numRows, width] fp32. kCls: row 0; kMean: the average, summed in fp64; kMax: the
// elementwise maximum; kLastToken: the last row; kNone: an error (the model has no pooling).
Result<std::vector<float>> poolHiddenStates(std::span<const float> rows, int32_t width,
                                            PoolingMode mode);
// v / max(|v|_2, 1e-12), sentence-transformers' Normalize (the norm in fp64).
std::vector<float> normalizedL2(std::span<const float> v);

} // namespace kiln::rt
