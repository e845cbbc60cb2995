#include "runtime/embed/pooling.h"

#include <algorithm>
#include <cmath>

namespace kiln::rt {

Result<PoolingMode> parsePoolingMode(std::string_view name) {
  if (name.empty())
    return PoolingMode::kNone;
  if (name == "cls")
    return PoolingMode::kCls;
  if (name == "mean")
    return PoolingMode::kMean;
  if (name == "max")
    return PoolingMode::kMax;
  if (name == "lasttoken")
    return PoolingMode::kLastToken;
  return invalidArgument("pooling '" + std::string(name) +
                         "' is not one of cls, mean, max, lasttoken");
}

std::string poolingModeName(PoolingMode mode) {
  switch (mode) {
  case PoolingMode::kCls:
    return "cls";
  case PoolingMode::kMean:
    return "mean";
  case PoolingMode::kMax:
    return "max";
  case PoolingMode::kLastToken:
    return "lasttoken";
  case PoolingMode::kNone:
    break;
  }
  return "";
}

Result<std::vector<float>> poolHiddenStates(std::span<const float> rows, int32_t width,
                                            PoolingMode mode) {
  if (width <= 0 || rows.empty() || rows.size() % static_cast<size_t>(width) != 0)
    return invalidArgument("pooling needs at least one row of " + std::to_string(width) +
                           " values, got " + std::to_string(rows.size()) + " values");
  const size_t numRows = rows.size() / width;
  std::vector<float> out(width);
  switch (mode) {
  case PoolingMode::kCls:
    std::copy(rows.begin(), rows.begin() + width, out.begin());
    break;
  case PoolingMode::kLastToken:
    std::copy(rows.end() - width, rows.end(), out.begin());
    break;
  case PoolingMode::kMean:
    for (int32_t c = 0; c < width; ++c) {
      double sum = 0;
      for (size_t r = 0; r < numRows; ++r)
        sum += rows[r * width + c];
      out[c] = static_cast<float>(sum / static_cast<double>(numRows));
    }
    break;
  case PoolingMode::kMax:
    std::copy(rows.begin(), rows.begin() + width, out.begin());
    for (size_t r = 1; r < numRows; ++r)
      for (int32_t c = 0; c < width; ++c)
        out[c] = std::max(out[c], rows[r * width + c]);
    break;
  case PoolingMode::kNone:
    return failedPrecondition("the model has no pooling (no sentence-transformers Pooling module)");
  }
  return out;
}

std::vector<float> normalizedL2(std::span<const float> v) {
  double norm = 0;
  for (float x : v)
    norm += double(x) * x;
  const double scale = 1.0 / std::max(std::sqrt(norm), 1e-12);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = static_cast<float>(v[i] * scale);
  return out;
}

} // namespace kiln::rt
