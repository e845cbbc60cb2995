// Row-wise elementwise kernels: Embedding (a gather from the weight table), GatherRows, SiluMul,
// GeluTanhMul, Softcap, Gelu, Add (plan.fbs). Memory bound: each thread moves one 16-byte vector
// when the row width allows.
//
// Grid rule (all seven): grid.x = rows (Embedding, GatherRows: x_rows Tokens / Logits; SiluMul,
// GeluTanhMul, Softcap, Gelu, Add: the op's output rows), grid.y = ceil(WIDTH / (THREADS *
// rowVectorWidth<T, WIDTH>())), block = THREADS, no shared memory. WIDTH is hidden for Embedding,
// the row width for GatherRows, Softcap, Gelu and Add, the intermediate size for SiluMul and
// GeluTanhMul.
//
// Numerics (plan.fbs): fp32 compute, each output element rounded once to T, in the CPU
// reference's operation order (kernels/cpu/elementwise.cc), so fp16/bf16 results match it.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// Elements per thread: one 16-byte vector of T when the width is a whole number of them (then
// every row start stays 16-byte aligned), else one element.
template <typename T, int WIDTH> constexpr int rowVectorWidth() {
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  return WIDTH % kWide == 0 ? kWide : 1;
}

// The index of this thread's vector in its row, or -1 past the row's end.
template <int VECTORS, int THREADS> __device__ __forceinline__ int rowVectorIndex() {
  const int index = blockIdx.y * THREADS + threadIdx.x;
  return index < VECTORS ? index : -1;
}

template <typename T, int N> __device__ __forceinline__ void loadRow(const T *src, float *dst) {
  if constexpr (N * sizeof(T) % 16 == 0)
    loadFloatsAligned<T, N>(src, dst);
  else
    loadFloats<T, N>(src, dst);
}
template <typename T, int N> __device__ __forceinline__ void storeRow(const float *src, T *dst) {
  if constexpr (N * sizeof(T) % 16 == 0)
    storeFloatsAligned<T, N>(src, dst);
  else
    storeFloats<T, N>(src, dst);
}

// Copies row `from` of src (element type S) to row `to` of dst (element type T), converting, each
// value times `scale` in fp32 first unless it is 1 (Gemma's scaled embeddings).
template <typename T, typename S, int WIDTH, int THREADS>
__device__ __forceinline__ void copyRow(const S *src, int64_t from, T *dst, int64_t to,
                                        float scale = 1.0f) {
  constexpr int kVec = rowVectorWidth<T, WIDTH>() < rowVectorWidth<S, WIDTH>()
                           ? rowVectorWidth<T, WIDTH>()
                           : rowVectorWidth<S, WIDTH>();
  const int index = rowVectorIndex<WIDTH / kVec, THREADS>();
  if (index < 0)
    return;
  float v[kVec];
  loadRow<S, kVec>(src + from * WIDTH + index * kVec, v);
  if (scale != 1.0f)
#pragma unroll
    for (int e = 0; e < kVec; ++e)
      v[e] *= scale;
  storeRow<T, kVec>(v, dst + to * WIDTH + index * kVec);
}

// Writes zeros to this thread's part of row `to` of dst.
template <typename T, int WIDTH, int THREADS>
__device__ __forceinline__ void zeroRow(T *dst, int64_t to) {
  constexpr int kVec = rowVectorWidth<T, WIDTH>();
  const int index = rowVectorIndex<WIDTH / kVec, THREADS>();
  if (index < 0)
    return;
  float v[kVec] = {};
  storeRow<T, kVec>(v, dst + to * WIDTH + index * kVec);
}

// y[t] = table[tokenIds[t] - vocabStart], zeros for ids outside this rank's rows; the table's
// dtype W may differ from the activation dtype T.
template <typename T, typename W, int HIDDEN, int THREADS>
__device__ __forceinline__ void embedding(const EmbeddingParams &p) {
  const int t = blockIdx.x;
  if (t >= p.numTokens)
    return;
  const int64_t row = static_cast<int64_t>(p.tokenIds[t]) - p.vocabStart;
  if (row < 0 || row >= p.vocabRows)
    zeroRow<T, HIDDEN, THREADS>(static_cast<T *>(p.out), t);
  else
    copyRow<T, W, HIDDEN, THREADS>(static_cast<const W *>(p.table), row, static_cast<T *>(p.out), t,
                                   p.scale);
}

// y[i] = x[indices[i]]
template <typename T, int WIDTH, int THREADS>
__device__ __forceinline__ void gatherRows(const GatherRowsParams &p) {
  const int i = blockIdx.x;
  if (i >= p.numRows)
    return;
  copyRow<T, T, WIDTH, THREADS>(static_cast<const T *>(p.x), p.indices[i], static_cast<T *>(p.out),
                                i);
}

// y[r, i] = act(gu[r, i]) * gu[r, INTERMEDIATE + i]: the gated MLP's activations.
template <typename T, int INTERMEDIATE, int THREADS, typename Act>
__device__ __forceinline__ void gatedMul(const SiluMulParams &p, Act act) {
  constexpr int kVec = rowVectorWidth<T, INTERMEDIATE>();
  const int r = blockIdx.x;
  const int index = rowVectorIndex<INTERMEDIATE / kVec, THREADS>();
  if (r >= p.rows || index < 0)
    return;
  const T *gate = static_cast<const T *>(p.gateUp) + static_cast<int64_t>(r) * 2 * INTERMEDIATE;
  float g[kVec], u[kVec], y[kVec];
  loadRow<T, kVec>(gate + index * kVec, g);
  loadRow<T, kVec>(gate + INTERMEDIATE + index * kVec, u);
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    y[e] = act(g[e]) * u[e];
  storeRow<T, kVec>(y, static_cast<T *>(p.out) + static_cast<int64_t>(r) * INTERMEDIATE +
                           index * kVec);
}

// silu(g) = g / (1 + e^-g): expf(-g) -> inf for g < -88 gives -0, as torch does.
struct SiluAct {
  __device__ __forceinline__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};
// torch's gelu(approximate="tanh") in its order of operations, as kernels/cpu/elementwise.cc.
struct GeluTanhAct {
  __device__ __forceinline__ float operator()(float g) const {
    const float inner = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
    return 0.5f * g * (1.0f + tanhf(inner));
  }
};

template <typename T, int INTERMEDIATE, int THREADS>
__device__ __forceinline__ void siluMul(const SiluMulParams &p) {
  gatedMul<T, INTERMEDIATE, THREADS>(p, SiluAct{});
}

// GeGLU (Gemma).
template <typename T, int INTERMEDIATE, int THREADS>
__device__ __forceinline__ void geluTanhMul(const SiluMulParams &p) {
  gatedMul<T, INTERMEDIATE, THREADS>(p, GeluTanhAct{});
}

// y = f(x) elementwise, row by row, in fp32; y may be x.
template <typename T, int WIDTH, int THREADS, class F>
__device__ __forceinline__ void mapRow(const void *in, void *out, int rows, F f) {
  constexpr int kVec = rowVectorWidth<T, WIDTH>();
  const int r = blockIdx.x;
  const int index = rowVectorIndex<WIDTH / kVec, THREADS>();
  if (r >= rows || index < 0)
    return;
  const int64_t offset = static_cast<int64_t>(r) * WIDTH + index * kVec;
  float x[kVec];
  loadRow<T, kVec>(static_cast<const T *>(in) + offset, x);
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    x[e] = f(x[e]);
  storeRow<T, kVec>(x, static_cast<T *>(out) + offset);
}

// y = tanh(x / cap) * cap (Gemma 2's final logit soft-capping).
template <typename T, int WIDTH, int THREADS>
__device__ __forceinline__ void softcap(const SoftcapParams &p) {
  const float cap = p.cap;
  mapRow<T, WIDTH, THREADS>(p.x, p.out, p.rows, [cap](float x) { return softcapScore(x, cap); });
}

// y = 0.5 x (1 + erf(x / sqrt(2))) (encoders' exact GELU).
template <typename T, int WIDTH, int THREADS>
__device__ __forceinline__ void gelu(const GeluParams &p) {
  mapRow<T, WIDTH, THREADS>(p.x, p.out, p.rows, [](float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  });
}

// y = a + b, row by row.
template <typename T, int WIDTH, int THREADS>
__device__ __forceinline__ void add(const AddParams &p) {
  constexpr int kVec = rowVectorWidth<T, WIDTH>();
  const int r = blockIdx.x;
  const int index = rowVectorIndex<WIDTH / kVec, THREADS>();
  if (r >= p.rows || index < 0)
    return;
  const int64_t offset = static_cast<int64_t>(r) * WIDTH + index * kVec;
  float a[kVec], b[kVec];
  loadRow<T, kVec>(static_cast<const T *>(p.a) + offset, a);
  loadRow<T, kVec>(static_cast<const T *>(p.b) + offset, b);
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    a[e] += b[e];
  storeRow<T, kVec>(a, static_cast<T *>(p.out) + offset);
}

} // namespace kiln::kernels::cuda
