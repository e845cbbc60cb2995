// The subset of CUDA's warp matrix API (nvcuda::wmma, <mma.h>) that kernels/cuda uses, on the
// host: 16x16x16 tiles of __half / __nv_bfloat16 with float accumulators.
//
// On a GPU a fragment is spread over the 32 lanes of a warp in an unspecified layout, and every
// operation is collective. Here each simulated thread holds the whole tile and computes it
// alone (every lane of the warp the same values), which is exactly what a kernel may rely on:
// it never reads fragment elements by index, only loads, stores, fills and multiplies. Products
// of 16-bit inputs are exact in fp32; sums run in k order with fp32 rounding at each step (the
// hardware's order is unspecified, so tests compare within a tolerance).
#pragma once

#include "cuda_bf16.h"
#include "cuda_fp16.h"

#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float toFloat(float v) {
  return v;
}
inline float toFloat(__half v) {
  return __half2float(v);
}
inline float toFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
} // namespace detail

// Elements kept as float in logical (row, column) order of the 16x16 tile.
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cudasim: only 16x16x16 tiles");
  static constexpr int num_elements = 256;
  float x[256];
};

template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
  constexpr bool kColMajor = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::toFloat(kColMajor ? p[c * ldm + r] : p[r * ldm + c]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float value) {
  for (float &v : f.x)
    v = value;
}

// d = a * b + c. `d` may be `c`.
template <typename T, typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, T, LayoutA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float sum = c.x[r * 16 + col];
      for (int k = 0; k < 16; ++k)
        sum += a.x[r * 16 + k] * b.x[k * 16 + col];
      out[r * 16 + col] = sum;
    }
  for (int i = 0; i < 256; ++i)
    d.x[i] = out[i];
}

} // namespace nvcuda::wmma
