// kiln-roofline: the two ceilings a GPU benchmark is judged against, measured on the card at hand
// (docs/gpu.md, tools/bench/compare.py):
//   HBM bandwidth: a large device-to-device copy (bytes read + written) and a read-only reduction
//     kernel (bytes read), best of N repetitions each; hbm_bytes_per_s is the larger.
//   bf16 tensor-core peak: an M x N x K bf16 GEMM with fp32 accumulate through cuBLASLt (8192^3 by
//     default), random operands (zeros run faster than real data), best of N after warm-up, over
//     the first few algorithms cuBLASLt's heuristic offers.
// Prints one JSON object on stdout (roofline_report.h) and a readable summary on stderr. Without a
// GPU it prints a JSON object saying "no GPU: ..." and exits 2. cudart is linked statically and
// cuBLASLt is loaded at run time, so the binary starts on any machine.
#include "tools/bench/bench_kernels.cuh"
#include "tools/bench/roofline_report.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace kiln::tools {
namespace {

constexpr int kExitNoGpu = 2;
constexpr int kExitPartial = 1;

struct Options {
  int repetitions = 30;
  int warmup = 3;
  uint64_t copyMiB = 2048; // capped by a quarter of the free memory
  uint64_t gemmSize = 8192;
  int gemmAlgorithms = 4;
};

bool ok(cudaError_t rc, const std::string &what, std::vector<std::string> &errors) {
  if (rc == cudaSuccess)
    return true;
  errors.push_back(what + ": " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
  return false;
}

// Times `op` once per repetition with events; an empty result means a launch failed.
std::vector<float> timeRepetitions(const Options &o, const std::function<cudaError_t()> &op,
                                   const std::string &what, std::vector<std::string> &errors) {
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<float> ms;
  if (!ok(cudaEventCreate(&start), "cudaEventCreate", errors) ||
      !ok(cudaEventCreate(&stop), "cudaEventCreate", errors))
    return ms;
  bool good = true;
  for (int i = 0; i < o.warmup && good; ++i)
    good = ok(op(), what + " (warm-up)", errors);
  good = good && ok(cudaDeviceSynchronize(), what + " (warm-up sync)", errors);
  for (int i = 0; i < o.repetitions && good; ++i) {
    float t = 0;
    good = ok(cudaEventRecord(start), "cudaEventRecord", errors) && ok(op(), what, errors) &&
           ok(cudaEventRecord(stop), "cudaEventRecord", errors) &&
           ok(cudaEventSynchronize(stop), what + " (sync)", errors) &&
           ok(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime", errors);
    if (good)
      ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return good ? ms : std::vector<float>{};
}

void measureBandwidth(const Options &o, RooflineReport &r) {
  size_t freeBytes = 0, totalBytes = 0;
  if (!ok(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo", r.errors))
    return;
  uint64_t bytes = std::min<uint64_t>(o.copyMiB << 20, (freeBytes / 4) & ~uint64_t(0xffff));
  void *src = nullptr, *dst = nullptr;
  unsigned *sink = nullptr;
  if (ok(cudaMalloc(&src, bytes), "cudaMalloc(copy source)", r.errors) &&
      ok(cudaMalloc(&dst, bytes), "cudaMalloc(copy destination)", r.errors) &&
      ok(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc(sink)", r.errors) &&
      ok(cudaMemset(src, 0x5a, bytes), "cudaMemset", r.errors)) {
    r.copyBytes = r.readBytes = bytes;
    r.copyBestMs = bestMs(timeRepetitions(
        o, [&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); },
        "device-to-device copy", r.errors));
    int perSm = 0;
    const int threads = 512;
    ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, readReduce, threads, 0),
       "cudaOccupancyMaxActiveBlocksPerMultiprocessor", r.errors);
    const int blocks = std::max(1, perSm) * r.smCount;
    r.readBestMs = bestMs(timeRepetitions(
        o,
        [&] {
          readReduce<<<blocks, threads>>>(static_cast<const uint4 *>(src), bytes / 16, sink);
          return cudaGetLastError();
        },
        "read-only reduction kernel", r.errors));
  }
  cudaFree(src);
  cudaFree(dst);
  cudaFree(sink);
}

// The cuBLASLt entry points this tool needs, resolved from the toolkit's library at run time.
struct CublasLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetVersion) getVersion = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

template <typename F> bool resolve(void *lib, const char *name, F &fn, std::string &error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    error = std::string("cuBLASLt has no symbol ") + name;
  return fn != nullptr;
}

bool loadCublasLt(CublasLt &lt, std::string &error) {
  void *lib = nullptr;
  for (const char *name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib) {
    error = std::string("cannot load libcublasLt.so.13 (or .12): ") + dlerror();
    return false;
  }
  return resolve(lib, "cublasLtCreate", lt.create, error) &&
         resolve(lib, "cublasLtDestroy", lt.destroy, error) &&
         resolve(lib, "cublasLtGetVersion", lt.getVersion, error) &&
         resolve(lib, "cublasLtMatmulDescCreate", lt.descCreate, error) &&
         resolve(lib, "cublasLtMatmulDescDestroy", lt.descDestroy, error) &&
         resolve(lib, "cublasLtMatmulDescSetAttribute", lt.descSetAttribute, error) &&
         resolve(lib, "cublasLtMatrixLayoutCreate", lt.layoutCreate, error) &&
         resolve(lib, "cublasLtMatrixLayoutDestroy", lt.layoutDestroy, error) &&
         resolve(lib, "cublasLtMatmulPreferenceCreate", lt.preferenceCreate, error) &&
         resolve(lib, "cublasLtMatmulPreferenceDestroy", lt.preferenceDestroy, error) &&
         resolve(lib, "cublasLtMatmulPreferenceSetAttribute", lt.preferenceSetAttribute, error) &&
         resolve(lib, "cublasLtMatmulAlgoGetHeuristic", lt.algoGetHeuristic, error) &&
         resolve(lib, "cublasLtMatmul", lt.matmul, error);
}

bool blasOk(cublasStatus_t rc, const std::string &what, std::vector<std::string> &errors) {
  if (rc == CUBLAS_STATUS_SUCCESS)
    return true;
  errors.push_back(what + ": cublasStatus " + std::to_string(int(rc)));
  return false;
}

// D = A^T B in column-major (the "TN" layout cuBLAS runs fastest): A is K x M, B is K x N, D is
// M x N, all bf16, accumulated and scaled in fp32.
struct GemmBuffers {
  void *a = nullptr, *b = nullptr, *d = nullptr, *workspace = nullptr;
  size_t workspaceBytes = 64u << 20;
};

void timeGemmAlgorithms(const Options &o, const CublasLt &lt, cublasLtHandle_t handle,
                        const GemmBuffers &g, RooflineReport &r) {
  const uint64_t n = o.gemmSize;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  std::vector<cublasLtMatmulHeuristicResult_t> results(o.gemmAlgorithms);
  int found = 0;
  bool good =
      blasOk(lt.descCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate", r.errors) &&
      blasOk(lt.descSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)), "TRANSA",
             r.errors) &&
      blasOk(lt.descSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)), "TRANSB",
             r.errors) &&
      blasOk(lt.layoutCreate(&la, CUDA_R_16BF, n, n, n), "layout A", r.errors) &&
      blasOk(lt.layoutCreate(&lb, CUDA_R_16BF, n, n, n), "layout B", r.errors) &&
      blasOk(lt.layoutCreate(&ld, CUDA_R_16BF, n, n, n), "layout D", r.errors) &&
      blasOk(lt.preferenceCreate(&pref), "MatmulPreferenceCreate", r.errors) &&
      blasOk(lt.preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &g.workspaceBytes, sizeof(g.workspaceBytes)),
             "MAX_WORKSPACE_BYTES", r.errors) &&
      blasOk(lt.algoGetHeuristic(handle, desc, la, lb, ld, ld, pref, o.gemmAlgorithms,
                                 results.data(), &found),
             "MatmulAlgoGetHeuristic", r.errors);
  if (good && found == 0)
    r.errors.push_back("cuBLASLt offers no algorithm for a bf16 " + std::to_string(n) + "^3 GEMM");
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; good && i < found; ++i) {
    auto ms = timeRepetitions(
        o,
        [&]() -> cudaError_t {
          cublasStatus_t rc = lt.matmul(handle, desc, &alpha, g.a, la, g.b, lb, &beta, g.d, ld,
                                        g.d, ld, &results[i].algo, g.workspace, g.workspaceBytes,
                                        nullptr);
          if (rc == CUBLAS_STATUS_SUCCESS)
            return cudaGetLastError();
          r.errors.push_back("cublasLtMatmul: cublasStatus " + std::to_string(int(rc)));
          return cudaErrorUnknown;
        },
        "cublasLtMatmul (algorithm " + std::to_string(i) + ")", r.errors);
    ++r.gemmAlgorithmsTried;
    if (auto best = bestMs(ms); best && (!r.gemmBestMs || *best < *r.gemmBestMs))
      r.gemmBestMs = best;
  }
  if (pref)
    lt.preferenceDestroy(pref);
  for (cublasLtMatrixLayout_t l : {la, lb, ld})
    if (l)
      lt.layoutDestroy(l);
  if (desc)
    lt.descDestroy(desc);
}

void measureGemm(const Options &o, RooflineReport &r) {
  CublasLt lt;
  std::string error;
  if (!loadCublasLt(lt, error)) {
    r.errors.push_back(error);
    return;
  }
  const uint64_t n = o.gemmSize;
  r.gemmM = r.gemmN = r.gemmK = n;
  const size_t bytes = n * n * sizeof(__nv_bfloat16);
  GemmBuffers g;
  cublasLtHandle_t handle = nullptr;
  if (ok(cudaMalloc(&g.a, bytes), "cudaMalloc(A)", r.errors) &&
      ok(cudaMalloc(&g.b, bytes), "cudaMalloc(B)", r.errors) &&
      ok(cudaMalloc(&g.d, bytes), "cudaMalloc(D)", r.errors) &&
      ok(cudaMalloc(&g.workspace, g.workspaceBytes), "cudaMalloc(workspace)", r.errors) &&
      blasOk(lt.create(&handle), "cublasLtCreate", r.errors)) {
    fillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16 *>(g.a), n * n, 1u);
    fillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16 *>(g.b), n * n, 2u);
    if (ok(cudaGetLastError(), "fillBf16", r.errors) &&
        ok(cudaDeviceSynchronize(), "fillBf16 (sync)", r.errors))
      timeGemmAlgorithms(o, lt, handle, g, r);
  }
  if (handle)
    lt.destroy(handle);
  for (void *p : {g.a, g.b, g.d, g.workspace})
    cudaFree(p);
}

bool parseOptions(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](uint64_t &out, uint64_t lo, uint64_t hi) {
      if (i + 1 >= argc)
        return false;
      char *end = nullptr;
      out = std::strtoull(argv[++i], &end, 10);
      return *end == '\0' && out >= lo && out <= hi;
    };
    uint64_t v = 0;
    if (arg == "--repetitions" && value(v, 1, 1000))
      o.repetitions = int(v);
    else if (arg == "--copy-mib" && value(v, 1, 1 << 20))
      o.copyMiB = v;
    else if (arg == "--gemm-size" && value(v, 256, 32768))
      o.gemmSize = v;
    else if (arg == "--gemm-algorithms" && value(v, 1, 32))
      o.gemmAlgorithms = int(v);
    else {
      std::fprintf(stderr,
                   "roofline: bad argument '%s'\nusage: roofline [--repetitions 1..1000] "
                   "[--copy-mib N] [--gemm-size 256..32768] [--gemm-algorithms 1..32]\n",
                   arg.c_str());
      return false;
    }
  }
  return true;
}

// The device's identity; false (with the JSON already printed) when there is no usable GPU.
bool describeDevice(RooflineReport &r) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  std::string reason;
  if (rc != cudaSuccess)
    reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + " (" +
             cudaGetErrorString(rc) + ")";
  else if (count == 0)
    reason = "the CUDA runtime sees no device";
  if (!reason.empty()) {
    std::printf("%s\n", noGpuJson(reason).c_str());
    std::fprintf(stderr, "roofline: no GPU: %s\n", reason.c_str());
    return false;
  }
  cudaDeviceProp p{};
  ok(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties", r.errors);
  r.deviceName = p.name;
  r.ccMajor = p.major;
  r.ccMinor = p.minor;
  r.smCount = p.multiProcessorCount;
  r.memoryBytes = p.totalGlobalMem;
  cudaDriverGetVersion(&r.driverVersion);
  cudaRuntimeGetVersion(&r.runtimeVersion);
  return true;
}

int run(int argc, char **argv) {
  Options o;
  if (!parseOptions(argc, argv, o))
    return 64;
  RooflineReport r;
  if (!describeDevice(r))
    return kExitNoGpu;
  r.repetitions = o.repetitions;
  measureBandwidth(o, r);
  measureGemm(o, r);
  std::printf("%s\n", toJson(r).c_str());
  std::fprintf(stderr, "roofline: %s (%s, %d SMs): copy %.0f GB/s, read %.0f GB/s, bf16 %.1f TFLOP/s\n",
               r.deviceName.c_str(), smTarget(r.ccMajor, r.ccMinor).c_str(), r.smCount,
               r.copyBestMs ? perSecond(2.0 * r.copyBytes, *r.copyBestMs) / 1e9 : 0.0,
               r.readBestMs ? perSecond(double(r.readBytes), *r.readBestMs) / 1e9 : 0.0,
               r.gemmBestMs ? perSecond(gemmFlops(r.gemmM, r.gemmN, r.gemmK), *r.gemmBestMs) / 1e12
                            : 0.0);
  for (const std::string &e : r.errors)
    std::fprintf(stderr, "roofline: error: %s\n", e.c_str());
  return r.errors.empty() ? 0 : kExitPartial;
}

} // namespace
} // namespace kiln::tools

int main(int argc, char **argv) { return kiln::tools::run(argc, argv); }
