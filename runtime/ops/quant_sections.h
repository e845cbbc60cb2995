// Where a bound quantized weight keeps its values, scales and mins (runtime/base/quant_layout.h),
// as the CUDA kernels take them (kernels/cuda/params.h QuantSections), and the kernels' `format`
// and `group` constants for it. Used by the op table entries that read quantized weights on the
// GPU (Linear, Embedding) and by the CUDA backend's Linear (runtime/hal/cuda/cuda_device.cc).
#pragma once

#include "kernels/cuda/params.h"
#include "runtime/ops/bound_op.h"
#include "runtime/ops/plan_types.h"

#include <map>
#include <string>

namespace kiln::rt {

static_assert(kernels::cuda::kQuantFormatQ8 == int(QuantFormat::kQ8) + 1 &&
                  kernels::cuda::kQuantFormatQ4 == int(QuantFormat::kQ4) + 1 &&
                  kernels::cuda::kQuantFormatQ4Min == int(QuantFormat::kQ4Min) + 1 &&
                  kernels::cuda::kQuantFormatQ4Zero == int(QuantFormat::kQ4Zero) + 1 &&
                  kernels::cuda::kQuantFormatQ8Float == int(QuantFormat::kQ8Float) + 1 &&
                  kernels::cuda::kQuantFormatQ8FloatF32 == int(QuantFormat::kQ8FloatF32) + 1,
              "the kernels' format constant is QuantFormat + 1");

// b is a bound quantized weight [fixedRows, width] (the plan check validated its layout).
inline kernels::cuda::QuantSections quantSectionsOf(const BoundBuffer &b) {
  const QuantLayout layout = quantLayout(quantFormatOf(b.dtype), b.fixedRows, b.width, b.groupSize);
  const auto *base = static_cast<const uint8_t *>(b.data);
  return {base, base + layout.scalesOffset, layout.minsOffset ? base + layout.minsOffset : nullptr};
}

// {"format": QuantFormat + 1, "group": group_size} of a quantized weight buffer.
inline std::map<std::string, std::string> quantKernelConstants(const schema::BufferT &w) {
  return {{"format", std::to_string(int(quantFormatOf(w.dtype)) + 1)},
          {"group", std::to_string(w.group_size)}};
}

} // namespace kiln::rt
