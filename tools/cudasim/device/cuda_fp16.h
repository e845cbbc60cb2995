// cudasim's <cuda_fp16.h>: __half as 16 IEEE bits with the conversions kernels/cuda uses, rounding
// to nearest even exactly as the GPU's cvt.rn.f16.f32 does (runtime/base/half.h).
#pragma once

#include "runtime/base/half.h"

struct __half {
  unsigned short __x;
};

inline float __half2float(__half h) {
  return kiln::f16ToF32(h.__x);
}
inline __half __float2half_rn(float f) {
  return __half{kiln::f32ToF16(f)};
}
inline __half __float2half(float f) {
  return __float2half_rn(f);
}
