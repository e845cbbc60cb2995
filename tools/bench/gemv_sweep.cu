// kiln-gemv-sweep: which shape of the batch-1 GEMV kernel streams a decode Linear's weights
// closest to the HBM bandwidth, measured on the card at hand (docs/benchmarks.md, "GEMV sweep").
// For each Linear shape of an 8B Llama (qkv, o, gate_up, down; bf16 weights) it times kernel
// variants that differ in threads per CTA, W rows per warp, 16-byte loads in flight per lane,
// whether x is staged in shared memory, the load's cache hint, and whether an RMSNorm of x is
// folded into the prologue (the fusion docs/benchmarks.md asks for). Each variant runs as a CUDA
// graph of kLaunches launches over rotating copies of W (more bytes than L2 holds, as in a decode
// step where every layer has its own weights), so launch gaps count as they do in kiln's graphs.
// Denominators measured in the same run: a read-only kernel over the whole buffer (the HBM
// ceiling) and the same read kernel over exactly one W per launch (the ceiling for a kernel of
// that size). Every variant's y is checked against an fp32 reference kernel.
// Prints a table on stdout; exits 2 without a GPU.
#include "tools/bench/bench_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using kiln::tools::fillBf16;
using kiln::tools::readReduce;

constexpr int kLaunches = 64;
constexpr float kEps = 1e-5f;

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t rc_ = (call);                                                                      \
    if (rc_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(rc_));  \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__device__ __forceinline__ uint4 loadW(const uint4 *p, bool hint) {
  if (!hint)
    return __ldg(p);
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Eight bf16 of a 16-byte vector times eight floats, accumulated in fp32.
__device__ __forceinline__ float dot8(uint4 w, const float *x) {
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(words[i] << 16), x[2 * i], acc);
    acc = fmaf(__uint_as_float(words[i] & 0xffff0000u), x[2 * i + 1], acc);
  }
  return acc;
}
__device__ __forceinline__ void unpack8(uint4 v, float *out) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y[o] = sum_k W[o, k] * x'[k], x' = x (NORM false) or x * rsqrt(mean(x^2) + eps) * gamma.
// XSMEM: x' staged once per CTA in shared memory as fp32 (always so when NORM).
template <int THREADS, int OUTS, int UNROLL, bool XSMEM, bool HINT, bool NORM, int K>
__global__ void __launch_bounds__(THREADS)
    gemvVariant(const __nv_bfloat16 *__restrict__ x, const __nv_bfloat16 *__restrict__ w,
                const __nv_bfloat16 *__restrict__ gamma, __nv_bfloat16 *__restrict__ y, int out) {
  constexpr int kSteps = K / 8; // 16-byte vectors per W row
  constexpr bool kStage = XSMEM || NORM;
  __shared__ float xs[kStage ? K : 1];
  __shared__ float partial[THREADS / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if constexpr (kStage) {
    float ss = 0.0f;
    for (int s = threadIdx.x; s < kSteps; s += THREADS) {
      float v[8];
      unpack8(reinterpret_cast<const uint4 *>(x)[s], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        xs[s * 8 + i] = v[i];
        ss += v[i] * v[i];
      }
    }
    if constexpr (NORM) {
      ss = warpSum(ss);
      if (lane == 0)
        partial[warp] = ss;
      __syncthreads();
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < THREADS / 32; ++i)
        total += partial[i];
      const float inv = rsqrtf(total / K + kEps);
      for (int s = threadIdx.x; s < kSteps; s += THREADS) {
        float g[8];
        unpack8(reinterpret_cast<const uint4 *>(gamma)[s], g);
#pragma unroll
        for (int i = 0; i < 8; ++i)
          xs[s * 8 + i] *= inv * g[i];
      }
    }
    __syncthreads();
  }
  const int first = (blockIdx.x * (THREADS / 32) + warp) * OUTS;
  bool valid[OUTS];
  const uint4 *rows[OUTS];
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    valid[o] = first + o < out;
    rows[o] = reinterpret_cast<const uint4 *>(w) + size_t(valid[o] ? first + o : 0) * kSteps;
  }
  float acc[OUTS] = {};
  for (int s0 = lane; s0 < kSteps; s0 += 32 * UNROLL) {
    uint4 wv[OUTS][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int o = 0; o < OUTS; ++o)
        wv[o][u] =
            s0 + 32 * u < kSteps ? loadW(rows[o] + s0 + 32 * u, HINT) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int s = s0 + 32 * u;
      if (s >= kSteps)
        break;
      float xv[8];
      if constexpr (kStage) {
        const float4 a = reinterpret_cast<const float4 *>(xs)[2 * s];
        const float4 b = reinterpret_cast<const float4 *>(xs)[2 * s + 1];
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
        xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
      } else {
        unpack8(__ldg(reinterpret_cast<const uint4 *>(x) + s), xv);
      }
#pragma unroll
      for (int o = 0; o < OUTS; ++o)
        acc[o] += dot8(wv[o][u], xv);
    }
  }
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const float sum = warpSum(acc[o]);
    if (lane == 0 && valid[o])
      y[first + o] = __float2bfloat16_rn(sum);
  }
}

// The reference: one thread per output, fp32 throughout (norm applied in fp32 when gamma).
__global__ void gemvReference(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                              const __nv_bfloat16 *gamma, float *y, int out, int k) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out)
    return;
  float inv = 1.0f;
  if (gamma) {
    float ss = 0.0f;
    for (int i = 0; i < k; ++i)
      ss += __bfloat162float(x[i]) * __bfloat162float(x[i]);
    inv = rsqrtf(ss / k + kEps);
  }
  float acc = 0.0f;
  for (int i = 0; i < k; ++i) {
    const float xi = __bfloat162float(x[i]) * (gamma ? inv * __bfloat162float(gamma[i]) : 1.0f);
    acc += __bfloat162float(w[size_t(o) * k + i]) * xi;
  }
  y[o] = acc;
}

__global__ void emptyKernel() {}

// Median time of one launch, from a graph of kLaunches launches (best of 5 graph replays).
double graphMicros(const std::function<void(int, cudaStream_t)> &launch) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i)
    launch(i, stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaGraphLaunch(exec, stream)); // warm-up
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms);
  }
  CHECK(cudaGetLastError());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(stream);
  return best * 1000.0 / kLaunches;
}

struct Shape {
  const char *name;
  int out, k;
};

struct Buffers {
  __nv_bfloat16 *w = nullptr; // `copies` copies of [out, k]
  __nv_bfloat16 *x = nullptr, *gamma = nullptr, *y = nullptr;
  float *ref = nullptr, *refNorm = nullptr;
  int copies = 0;
};

using Launcher = void (*)(const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *,
                          __nv_bfloat16 *, int, cudaStream_t);

template <int THREADS, int OUTS, int UNROLL, bool XSMEM, bool HINT, bool NORM, int K>
void launchVariant(const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *gamma,
                   __nv_bfloat16 *y, int out, cudaStream_t stream) {
  constexpr int perCta = THREADS / 32 * OUTS;
  gemvVariant<THREADS, OUTS, UNROLL, XSMEM, HINT, NORM, K>
      <<<(out + perCta - 1) / perCta, THREADS, 0, stream>>>(x, w, gamma, y, out);
}

struct Variant {
  std::string name;
  bool norm;
  Launcher launch4096, launch14336;
};

std::string variantName(int threads, int outs, int unroll, bool xsmem, bool hint, bool norm) {
  return "t" + std::to_string(threads) + " o" + std::to_string(outs) + " u" +
         std::to_string(unroll) + (xsmem ? " smem" : "") + (hint ? " hint" : "") +
         (norm ? " +norm" : "");
}

template <int T, int O, int U, bool XS, bool H, bool N> Variant variant() {
  // x staged as fp32 needs 4 K bytes of shared memory: K = 4096 only.
  constexpr bool kStaged = XS || N;
  Launcher wide = nullptr;
  if constexpr (!kStaged)
    wide = &launchVariant<T, O, U, XS, H, N, 14336>;
  return {variantName(T, O, U, XS, H, N), N, &launchVariant<T, O, U, XS, H, N, 4096>, wide};
}

std::vector<Variant> variants() {
  constexpr bool no = false, yes = true;
  return {
      variant<256, 2, 2, no, no, no>(),    variant<256, 2, 4, no, no, no>(),
      variant<256, 2, 8, no, no, no>(),    variant<256, 4, 4, no, no, no>(),
      variant<256, 1, 8, no, no, no>(),    variant<128, 2, 4, no, no, no>(),
      variant<128, 4, 4, no, no, no>(),    variant<512, 2, 4, no, no, no>(),
      variant<128, 1, 8, no, no, no>(),    variant<64, 2, 4, no, no, no>(),
      variant<256, 2, 4, no, yes, no>(),   variant<256, 2, 8, no, yes, no>(),
      variant<128, 2, 8, no, yes, no>(),   variant<256, 4, 4, no, yes, no>(),
      variant<256, 2, 4, yes, no, no>(),   variant<256, 4, 4, yes, yes, no>(),
      variant<512, 4, 4, yes, yes, no>(),  variant<256, 2, 8, yes, yes, no>(),
      variant<256, 2, 4, yes, yes, yes>(), variant<256, 4, 4, yes, yes, yes>(),
      variant<512, 4, 4, yes, yes, yes>(), variant<512, 2, 8, yes, yes, yes>(),
  };
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);

  const std::vector<Shape> shapes = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const size_t poolBytes = size_t(1) << 30; // 1 GiB of weights: many copies of each shape
  Buffers b;
  CHECK(cudaMalloc(&b.w, poolBytes));
  CHECK(cudaMalloc(&b.x, 14336 * 2));
  CHECK(cudaMalloc(&b.gamma, 14336 * 2));
  CHECK(cudaMalloc(&b.y, 28672 * 2));
  CHECK(cudaMalloc(&b.ref, 28672 * 4));
  CHECK(cudaMalloc(&b.refNorm, 28672 * 4));
  unsigned *sink;
  CHECK(cudaMalloc(&sink, 4));
  fillBf16<<<1024, 256>>>(b.w, poolBytes / 2, 1u, 0.05f);
  fillBf16<<<64, 256>>>(b.x, 14336, 2u, 2.0f);
  fillBf16<<<64, 256>>>(b.gamma, 14336, 3u, 1.0f);
  CHECK(cudaDeviceSynchronize());

  // The HBM ceiling: the read kernel over the whole pool.
  const int readThreads = 512;
  int perSm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, readReduce, readThreads, 0));
  const int readBlocks = perSm * prop.multiProcessorCount;
  const double poolUs = graphMicros([&](int, cudaStream_t s) {
    readReduce<<<readBlocks, readThreads, 0, s>>>(reinterpret_cast<const uint4 *>(b.w),
                                                poolBytes / 16, sink);
  });
  const double hbm = poolBytes / poolUs / 1e3; // GB/s
  std::printf("HBM ceiling (read kernel, 1 GiB): %.0f GB/s\n", hbm);
  const double emptyUs = graphMicros([&](int, cudaStream_t s) { emptyKernel<<<1, 32, 0, s>>>(); });
  std::printf("an empty kernel in a graph: %.2f us per launch\n\n", emptyUs);

  std::printf("%-8s %-22s %9s %8s %7s %8s %10s\n", "shape", "variant", "us", "GB/s", "of HBM",
              "of read", "max |err|");
  for (const Shape &shape : shapes) {
    const size_t bytes = size_t(shape.out) * shape.k * 2;
    const int copies = int(poolBytes / bytes);
    auto wCopy = [&](int i) { return b.w + size_t(i % copies) * shape.out * shape.k; };
    const double readUs = graphMicros([&](int i, cudaStream_t s) {
      readReduce<<<readBlocks, readThreads, 0, s>>>(reinterpret_cast<const uint4 *>(wCopy(i)),
                                                  bytes / 16, sink);
    });
    std::printf("%-8s %-22s %9.2f %8.0f %7.3f %8.3f %10s\n", shape.name, "read-only", readUs,
                bytes / readUs / 1e3, bytes / readUs / 1e3 / hbm, 1.0, "-");
    gemvReference<<<(shape.out + 127) / 128, 128>>>(b.x, b.w, nullptr, b.ref, shape.out, shape.k);
    gemvReference<<<(shape.out + 127) / 128, 128>>>(b.x, b.w, b.gamma, b.refNorm, shape.out,
                                                    shape.k);
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ref(shape.out), refNorm(shape.out);
    CHECK(cudaMemcpy(ref.data(), b.ref, shape.out * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(refNorm.data(), b.refNorm, shape.out * 4, cudaMemcpyDeviceToHost));
    for (const Variant &v : variants()) {
      const Launcher launch = shape.k == 4096 ? v.launch4096 : v.launch14336;
      if (!launch)
        continue;
      const __nv_bfloat16 *gamma = v.norm ? b.gamma : nullptr;
      CHECK(cudaMemset(b.y, 0, shape.out * 2));
      launch(b.x, b.w, gamma, b.y, shape.out, nullptr);
      const cudaError_t rc = cudaGetLastError();
      if (rc != cudaSuccess) {
        std::printf("%-8s %-22s launch failed: %s\n", shape.name, v.name.c_str(),
                    cudaGetErrorString(rc));
        continue;
      }
      CHECK(cudaDeviceSynchronize());
      std::vector<__nv_bfloat16> y(shape.out);
      CHECK(cudaMemcpy(y.data(), b.y, shape.out * 2, cudaMemcpyDeviceToHost));
      float err = 0.0f;
      for (int o = 0; o < shape.out; ++o) {
        const float want = v.norm ? refNorm[o] : ref[o];
        err = std::max(err, std::fabs(__bfloat162float(y[o]) - want) / (1.0f + std::fabs(want)));
      }
      const double us = graphMicros(
          [&](int i, cudaStream_t s) { launch(b.x, wCopy(i), gamma, b.y, shape.out, s); });
      std::printf("%-8s %-22s %9.2f %8.0f %7.3f %8.3f %10.2e%s\n", shape.name, v.name.c_str(), us,
                  bytes / us / 1e3, bytes / us / 1e3 / hbm, readUs / us, err,
                  err > 1e-2f ? "  WRONG" : "");
    }
    std::printf("\n");
  }
  return 0;
}
