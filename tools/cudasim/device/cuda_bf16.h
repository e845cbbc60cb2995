// cudasim's <cuda_bf16.h>: __nv_bfloat16 as 16 bits with the conversions kernels/cuda uses,
// rounding to nearest even as cvt.rn.bf16.f32 does (runtime/base/half.h).
#pragma once

#include "cuda_fp16.h"
#include "runtime/base/half.h"

struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  return kiln::bf16ToF32(h.__x);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16{kiln::f32ToBf16(f)};
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  return __float2bfloat16_rn(f);
}
