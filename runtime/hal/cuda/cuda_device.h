// The CUDA backend: one GPU through the driver API loaded at run time (cuda_driver.h), its
// primary context, one stream for every copy and launch, kernels from the artifact's kernel
// modules (CUBIN for the device's SM, else PTX JIT-compiled by the driver).
//
// Implemented: kernel ops (cuda_launch.h); Linear on cuBLASLt, also loaded at run time
// (cublaslt_library.h, cuda_linear.h: algorithms chosen at prepare per row bucket, one 32 MiB
// workspace); memoryInfo (cuMemGetInfo, for --gpu-memory-utilization); CUDA graphs of the stream
// (beginCapture/endCapture/replay), which the executor uses for padded decode steps per batch
// bucket. Multi-GPU collectives (NCCL) live in runtime/exec, outside this device.
//
// Run on an H100 (2026-11-22, docs/gpu.md): every GPU test (tests/runtime/hal_cuda/*_gpu.cc,
// tests/kernels/cuda, the end-to-end goldens) passed there. CI, without a GPU, checks the
// no-driver path, the driver and cuBLASLt tables, module selection, launch planning and the
// cuBLASLt descriptors as unit tests, and runs the GPU tests on cudasim (docs/cudasim.md).
#pragma once

#include "runtime/hal/cuda/cublaslt_library.h"
#include "runtime/hal/cuda/cuda_driver.h"
#include "runtime/hal/cuda/cuda_gemv.h"
#include "runtime/hal/cuda/cuda_launch.h"
#include "runtime/hal/cuda/cuda_linear.h"
#include "runtime/hal/cuda/cuda_quant_linear.h"
#include "runtime/hal/device.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

struct CudaDeviceOptions {
  std::string driverLibrary = "libcuda.so.1";
  int ordinal = 0;
  // Tried in order when the first Linear op is prepared (a missing cuBLASLt fails there).
  std::vector<std::string> cublasLtLibraries = defaultCublasLtLibraries();
  // Time cuBLASLt's candidate algorithms per Linear shape and row bucket at load and keep the
  // fastest (cuda_linear.h); off: the heuristic's first choice. KILN_LINEAR_AUTOTUNE=0 turns
  // the default off.
  bool autotuneLinear = linearAutotuneFromEnvironment();
  // Decode-sized Linears on the plan's GEMV kernel where it beats cuBLASLt (cuda_gemv.h).
  GemvMode linearGemv = gemvModeFromEnvironment();
  // GEMV launches overlap the kernel before them where the GPU allows it (sm_90+, cuda_gemv.h).
  bool overlapGemv = gemvOverlapFromEnvironment();
  // How quantized Linears run more than kGemvMaxRows rows: auto, tiles or dequantize
  // (cuda_quant_linear.h QuantGemmMode); createCudaDevice refuses another value.
  std::string quantGemm = quantGemmFromEnvironment();
};

// Errors: "no CUDA driver found (libcuda.so.1): ...", "cuInit failed: ...", "no CUDA device".
Result<std::unique_ptr<Device>> createCudaDevice(const CudaDeviceOptions &options = {});

// The artifact target name of a compute capability: "sm_90a" for 9.0 (kiln builds Hopper and
// Blackwell with their arch-specific features), "sm_86" for 8.6.
std::string smTargetName(int major, int minor);

struct KernelModuleRef {
  std::string target; // "sm_90a", "compute_80"
  schema::KernelFormat format = schema::KernelFormat::Cubin;
};
// Which module a device of compute capability major.minor loads: a CUBIN built for exactly its
// SM, else a CUBIN of the same major and a lower minor (binary compatible), else the PTX of the
// highest compute_XX <= its SM (driver JIT). The error names the device's SM and every target.
Result<size_t> selectKernelModule(int major, int minor,
                                  const std::vector<KernelModuleRef> &modules);

class CudaDevice final : public Device {
public:
  ~CudaDevice() override;

  const std::string &name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  const std::string &target() const override { return target_; }

  // Checks the plan's kernel modules against this device's SM and loads one (loadKernelModules).
  Status loadPlan(const schema::Plan &plan) override { return loadKernelModules(plan); }
  Result<DeviceMemoryInfo> memoryInfo() const override;
  Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) override;
  void free(DeviceMemory &memory) override;
  Result<DeviceMemory> importWeights(std::span<const uint8_t> hostBytes) override;
  Status copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) override;
  Status copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) override;

  // Kernel ops need loadKernelModules() first (they launch kernels by symbol). Linear ops run
  // on cuBLASLt, loaded, with its 32 MiB workspace, when the first one is prepared.
  Result<std::unique_ptr<PreparedOp>> prepareOp(const BoundOp &op) override;
  Status runOp(const PreparedOp &op, const StepCounts &counts) override;
  Status synchronize() override;

  // CUDA graphs of the device's stream (cuStreamBeginCapture in thread-local mode, instantiated
  // by endCapture, launched on the stream by replay).
  bool supportsGraphs() const override { return true; }
  Status beginCapture() override;
  Result<std::unique_ptr<CapturedProgram>> endCapture() override;
  Status replay(const CapturedProgram &program) override;
  // A Linear: "gemv <W rows>/warp", or "cublasLt <kept>/<candidates>" (1-based) for the counts' row
  // bucket.
  std::string describeOp(const PreparedOp &op, const StepCounts &counts) const override;
  // CUDA events on the device's stream (cuEventElapsedTime: about 0.5 us resolution).
  Result<std::unique_ptr<DeviceClock>> createClock(size_t marks) override;
  // With the loaded module's kiln_argmax_rows kernel (artifacts compiled before it lack it).
  bool canArgmaxRows() const override { return argmaxFunction_ != nullptr; }
  Status argmaxRows(const void *logits, int32_t rows, int32_t vocab, void *ids) override;

  // Loads the plan's module for this device (selectKernelModule); Executor::create calls it
  // through loadPlan.
  Status loadKernelModules(const schema::Plan &plan);

  // For a library that works on this device's queue (NCCL collectives): the driver table, the
  // primary context to make current on the calling thread, and the stream every op goes to.
  struct NativeHandles {
    std::shared_ptr<const CudaDriver> driver;
    CUcontext context = nullptr;
    CUstream stream = nullptr;
  };
  NativeHandles nativeHandles() const { return {driver_, context_, stream_}; }

private:
  friend Result<std::unique_ptr<Device>> createCudaDevice(const CudaDeviceOptions &options);
  explicit CudaDevice(std::shared_ptr<const CudaDriver> driver);
  Status open(int ordinal);
  Status makeCurrent() const;
  Result<CUfunction> function(const std::string &symbol) const;
  Status ensureOpScratch(size_t bytes);
  Status ensureCudaLinear(); // linear_ and its workspace, made by the first Linear prepared
  Result<std::unique_ptr<PreparedOp>> prepareLinear(const BoundOp &op);
  Result<std::unique_ptr<PreparedOp>> prepareQuantLinear(const BoundOp &op);
  Status runQuantLinear(const PreparedOp &prepared, const StepCounts &counts);
  // `rows` rows of a quantized Linear on the tile GEMM or dequantized for cuBLASLt.
  Status runQuantRows(const PreparedOp &prepared, int64_t rows, bool tiles,
                      const StepCounts &counts);
  // Which row buckets of a quantized Linear run on the tile GEMM (quantGemmMode_ auto, timed).
  Status timeQuantPaths(PreparedOp &prepared);
  // One cuLaunchKernel of `launch` on the stream; errors say it was for `what`.
  Status launchPlain(CUfunction function, CudaLaunch &launch, const std::string &what);
  Result<BoundBuffer> convertBias(const BoundBuffer &bias, schema::DType dtype);
  // Milliseconds per run of a candidate matmul on the stream, between two events.
  Result<double> timeLinearCandidate(const std::function<Status(CUstream)> &work);
  // The buffer timeLinearCandidate overwrites to empty L2 before each timed run.
  Status ensureL2Flush();
  // Which row buckets of a prepared Linear run on its GEMV kernel (gemvMode_, timings).
  Status prepareGemv(const BoundOp &op, PreparedOp &prepared);
  Status launchGemv(CUfunction function, const GemvPlan &plan, int32_t rows, int32_t outsPerWarp);

  std::shared_ptr<const CudaDriver> driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  std::string moduleTarget_;
  std::map<std::string, CUfunction> functions_;
  CUfunction argmaxFunction_ = nullptr;
  DeviceMemory opScratch_;
  std::vector<std::string> cublasLtLibraries_;
  bool autotuneLinear_ = true;
  GemvMode gemvMode_ = GemvMode::kAuto;
  bool overlapGemv_ = true;  // asked for, and the device is sm_90 or later (open)
  QuantGemmMode quantGemmMode_ = QuantGemmMode::kAuto;
  bool planHasGemv_ = false; // the loaded plan's GEMV kernels keep today's launch contract
  DeviceMemory linearWorkspace_;
  DeviceMemory dequantWorkspace_; // quantized Linears' W in x's dtype (cuda_quant_linear.h)
  uint64_t dequantBytes_ = 0;     // what the loaded plan's largest quantized W needs there
  DeviceMemory l2Flush_;          // twice the L2 size, while Linears are timed (ensureL2Flush)
  std::vector<DeviceMemory> convertedBiases_; // F32 biases of half Linears, in y's dtype
  std::unique_ptr<CudaLinear> linear_;        // made by the first prepareLinear
  std::string name_ = "cuda";
  std::string target_;
};

} // namespace kiln::rt
