// One element of an F32, F16 or BF16 buffer in host memory (a cpu device's activations or KV
// cache) read or written as fp32: for the runtime's own loops over such buffers (the cpu
// communicator's all-reduce, the KV-cache calibration), not for kernels.
#pragma once

#include "runtime/base/half.h"
#include "schema/plan_generated.h"

#include <cstddef>
#include <cstdint>

namespace kiln::rt {

inline size_t elementBytes(schema::DType dtype) {
  return dtype == schema::DType::F32 ? 4 : 2;
}

inline float loadElement(const void *base, size_t i, schema::DType dtype) {
  if (dtype == schema::DType::F32)
    return static_cast<const float *>(base)[i];
  const uint16_t bits = static_cast<const uint16_t *>(base)[i];
  return dtype == schema::DType::BF16 ? bf16ToF32(bits) : f16ToF32(bits);
}

inline void storeElement(void *base, size_t i, float value, schema::DType dtype) {
  if (dtype == schema::DType::F32)
    static_cast<float *>(base)[i] = value;
  else
    static_cast<uint16_t *>(base)[i] =
        dtype == schema::DType::BF16 ? f32ToBf16(value) : f32ToF16(value);
}

} // namespace kiln::rt
