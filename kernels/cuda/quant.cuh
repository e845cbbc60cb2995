// Quantized weights on the GPU (runtime/base/quant_layout.h; params.h QuantSections): every kernel
// here turns a run of 32 stored values into the exact fp32 weights the layout defines, as the CPU's
// dequantizeRow (kernels/cpu/linear_quant.cc) does:
//   Q8   scale * q             (q int8: 8 x 11 significant bits, exact)
//   Q8F  scale * e             (e fp8 E4M3: 4 x 11 bits, exact)
//   Q8F32 scale * e            (an fp32 scale: rounded once, as the cpu's product)
//   Q4   scale * (u - 8)       (exact; -0 where u is 8 and the scale negative, as on the cpu)
//   Q4M  fma(scale, u, min)    (scale * u exact, rounded once with the min)
//   Q4Z  scale * u - zero scale (exact, +0 for u == zero)
// gemvQuant is the decode GEMV on the packed bytes (one W row per warp, lanes side by side over
// runs, so a warp reads 512 (4-bit) or 1,024 (8-bit) contiguous bytes a step); dequantWeights
// writes a Linear's weights in the activation dtype for cuBLASLt (prefill: runtime/hal/cuda/
// cuda_device.cc); embeddingQuant gathers table rows.
#pragma once

#include "kiln/common.cuh"

namespace kiln::kernels::cuda {

// fp16 bits -> fp32 (exact), without the fp16 header's types.
__device__ __forceinline__ float halfBitsToFloat(unsigned int h) {
  const int sign = static_cast<int>((h & 0x8000u) << 16);
  const int exponent = static_cast<int>((h >> 10) & 0x1Fu);
  const int mantissa = static_cast<int>(h & 0x3FFu);
  if (exponent == 0) { // zero or subnormal: mantissa x 2^-24
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) // inf / NaN
    return __int_as_float(sign | 0x7F800000 | (mantissa << 13));
  return __int_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Where run `run` (columns [32 run, 32 run + 32)) of W row `row` keeps its values and scale.
template <int FORMAT, int IN, int GROUP> struct QuantRun {
  static_assert(IN % GROUP == 0 && GROUP % kQuantRun == 0, "groups are whole runs of 32");
  static constexpr bool kFp8 = FORMAT == kQuantFormatQ8Float || FORMAT == kQuantFormatQ8FloatF32;
  static constexpr bool kByte = FORMAT == kQuantFormatQ8 || kFp8;
  static constexpr int kRowBytes = kByte ? IN : IN / 2;
  static constexpr int kRunBytes = kByte ? kQuantRun : kQuantRun / 2;
  static constexpr int kRuns = IN / kQuantRun;

  // The run's stored bytes: 2 (8-bit) or 1 (4-bit) 16-byte vectors, read through the read-only
  // path.
  struct Raw {
    uint4 v[kRunBytes / 16];
  };
  static __device__ __forceinline__ Raw load(const QuantSections &w, int64_t row, int run) {
    const auto *src = reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(w.values) +
                                                      row * kRowBytes + run * kRunBytes);
    Raw raw;
#pragma unroll
    for (int i = 0; i < kRunBytes / 16; ++i)
      raw.v[i] = __ldg(src + i);
    return raw;
  }

  // What turns a run's stored values into weights: its group's scale, and the offset of Q4M (its
  // min) and Q4Z (-zero x scale).
  struct Scale {
    float scale, offset;
  };
  static __device__ __forceinline__ Scale scaleOf(const QuantSections &w, int64_t row, int run) {
    const int64_t slot = row * (IN / GROUP) + run * kQuantRun / GROUP;
    Scale s;
    s.scale = FORMAT == kQuantFormatQ8FloatF32
                  ? __ldg(static_cast<const float *>(w.scales) + slot)
                  : halfBitsToFloat(__ldg(static_cast<const unsigned short *>(w.scales) + slot));
    s.offset = 0.0f;
    if constexpr (FORMAT == kQuantFormatQ4Min)
      s.offset = halfBitsToFloat(__ldg(static_cast<const unsigned short *>(w.mins) + slot));
    if constexpr (FORMAT == kQuantFormatQ4Zero)
      s.offset =
          -static_cast<float>(__ldg(static_cast<const unsigned short *>(w.mins) + slot)) * s.scale;
    return s;
  }
  // One weight from its stored value: `v` a byte (8-bit formats) or a nibble (4-bit).
  static __device__ __forceinline__ float weightOf(unsigned int v, const Scale &s) {
    if constexpr (FORMAT == kQuantFormatQ8)
      return s.scale * static_cast<float>(static_cast<signed char>(v));
    if constexpr (kFp8)
      return s.scale * f8e4m3ToFloat(v);
    if constexpr (FORMAT == kQuantFormatQ4)
      return s.scale * static_cast<float>(static_cast<int>(v) - 8);
    return fmaf(s.scale, static_cast<float>(v), s.offset); // Q4M, Q4Z
  }

  // The run's 32 weights in fp32, exact as the layout defines them (see the top of this file). A
  // 4-bit run's byte b holds weight b (low nibble) and weight b + 16 (high nibble).
  static __device__ __forceinline__ void decode(const QuantSections &w, int64_t row, int run,
                                                const Raw &raw, float (&out)[kQuantRun]) {
    const Scale s = scaleOf(w, row, run);
    const auto *bytes = reinterpret_cast<const unsigned char *>(raw.v);
    if constexpr (kByte) {
#pragma unroll
      for (int i = 0; i < kQuantRun; ++i)
        out[i] = weightOf(bytes[i], s);
    } else {
#pragma unroll
      for (int b = 0; b < kQuantRun / 2; ++b) {
        out[b] = weightOf(bytes[b] & 0xFu, s);
        out[b + kQuantRun / 2] = weightOf(bytes[b] >> 4, s);
      }
    }
  }

  // Weights [8 q, 8 q + 8) of the run (q in 0..3), the same values decode gives them, from the 8
  // bytes that hold them: a quarter of the work, so four threads share a run. Loaded (the bytes
  // and the group's scale) apart from decoded, so a caller can have the loads in flight while it
  // works on something else.
  static constexpr int kQuarter = kQuantRun / 4;
  struct Quarter {
    uint2 bytes;
    Scale scale;
    int q;
  };
  static __device__ __forceinline__ Quarter loadQuarter(const QuantSections &w, int64_t row,
                                                        int run, int q) {
    const int byte0 = kByte ? q * kQuarter : (q % 2) * kQuarter;
    Quarter out;
    out.bytes = __ldg(reinterpret_cast<const uint2 *>(static_cast<const unsigned char *>(w.values) +
                                                      row * kRowBytes + run * kRunBytes + byte0));
    out.scale = scaleOf(w, row, run);
    out.q = q;
    return out;
  }
  static __device__ __forceinline__ void decodeQuarter(const Quarter &quarter,
                                                       float (&out)[kQuarter]) {
    const auto *bytes = reinterpret_cast<const unsigned char *>(&quarter.bytes);
    const int shift = !kByte && quarter.q >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < kQuarter; ++i)
      out[i] = weightOf(kByte ? bytes[i] : (bytes[i] >> shift) & 0xFu, quarter.scale);
  }
};

// ROWS rows of x against the warp's W row: each lane takes runs lane, lane + 32, ... and loads
// kUnroll of them before decoding any, so several 16-byte loads are in flight per lane.
template <typename T, int IN, typename Y, int FORMAT, int GROUP, int ROWS>
__device__ __forceinline__ void gemvQuantRows(const GemvQuantParams &p) {
  using Run = QuantRun<FORMAT, IN, GROUP>;
  constexpr int kUnroll = Run::kByte ? 2 : 4;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (kGemvThreads / 32) + threadIdx.x / 32;
  const bool valid = row < p.out; // warp-uniform: warps past `out` read row 0 and store nothing
  const int64_t wRow = valid ? row : 0;
  const T *__restrict__ x = static_cast<const T *>(p.x);
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    acc[r] = 0.0f;
  waitForPriorGrids();
  for (int s0 = lane; s0 < Run::kRuns; s0 += 32 * kUnroll) {
    typename Run::Raw raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s0 + 32 * u < Run::kRuns)
        raw[u] = Run::load(p.w, wRow, s0 + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int run = s0 + 32 * u;
      if (run >= Run::kRuns)
        break;
      float w[kQuantRun];
      Run::decode(p.w, wRow, run, raw[u], w);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float xv[kQuantRun];
        loadFloatsAligned<T, kQuantRun>(x + static_cast<int64_t>(r) * IN + run * kQuantRun, xv);
#pragma unroll
        for (int i = 0; i < kQuantRun; ++i)
          acc[r] += w[i] * xv[i];
      }
    }
  }
  Y *y = static_cast<Y *>(p.y);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float sum = warpSum(acc[r]);
    if (lane == 0 && valid)
      y[static_cast<int64_t>(r) * p.out + row] = fromFloat<Y>(p.bias ? sum + p.bias[row] : sum);
  }
}

template <typename T, int IN, typename Y, int FORMAT, int GROUP>
__device__ __forceinline__ void gemvQuant(const GemvQuantParams &p) {
  static_assert(kGemvMaxRows == 8, "one case per row count");
  switch (p.rows) {
  case 1:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 1>(p);
  case 2:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 2>(p);
  case 3:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 3>(p);
  case 4:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 4>(p);
  case 5:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 5>(p);
  case 6:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 6>(p);
  case 7:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 7>(p);
  case 8:
    return gemvQuantRows<T, IN, Y, FORMAT, GROUP, 8>(p);
  default:
    return; // the host launches 1..kGemvMaxRows rows only
  }
}

// out = the weights in T, one run of 32 per thread (see DequantParams).
template <typename T, int IN, int FORMAT, int GROUP>
__device__ __forceinline__ void dequantWeights(const DequantParams &p) {
  using Run = QuantRun<FORMAT, IN, GROUP>;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  waitForPriorGrids();
  if (index >= static_cast<int64_t>(p.rows) * Run::kRuns)
    return;
  const int64_t row = index / Run::kRuns;
  const int run = static_cast<int>(index % Run::kRuns);
  float w[kQuantRun];
  Run::decode(p.w, row, run, Run::load(p.w, row, run), w);
  storeFloatsAligned<T, kQuantRun>(w, static_cast<T *>(p.out) + row * IN + run * kQuantRun);
}

// y[t] = the table's row tokenIds[t] - vocabStart in T, zeros for ids outside this rank's rows;
// one CTA a token, its threads over the row's runs.
template <typename T, int HIDDEN, int FORMAT, int GROUP, int THREADS>
__device__ __forceinline__ void embeddingQuant(const EmbeddingParams &p) {
  using Run = QuantRun<FORMAT, HIDDEN, GROUP>;
  const int t = blockIdx.x;
  if (t >= p.numTokens)
    return;
  const int64_t row = static_cast<int64_t>(p.tokenIds[t]) - p.vocabStart;
  const bool inside = row >= 0 && row < p.vocabRows;
  const QuantSections w{p.table, p.scales, p.mins};
  T *dst = static_cast<T *>(p.out) + static_cast<int64_t>(t) * HIDDEN;
  for (int run = threadIdx.x; run < Run::kRuns; run += THREADS) {
    float v[kQuantRun] = {};
    if (inside)
      Run::decode(w, row, run, Run::load(w, row, run), v);
    if (p.scale != 1.0f)
#pragma unroll
      for (int e = 0; e < kQuantRun; ++e)
        v[e] *= p.scale;
    storeFloatsAligned<T, kQuantRun>(v, dst + run * kQuantRun);
  }
}

} // namespace kiln::kernels::cuda
