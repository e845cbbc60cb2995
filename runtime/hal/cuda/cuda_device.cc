// See cuda_device.h. Every driver call is checked and reported by name.
#include "runtime/hal/cuda/cuda_device.h"

#include "kernels/cuda/params.h"
#include "runtime/base/half.h"
#include "runtime/ops/plan_types.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>

namespace kiln::rt {
namespace {

struct ParsedTarget {
  bool ptx = false;
  int number = 0;
  std::string suffix;
};

bool parseTarget(const std::string &target, ParsedTarget &parsed) {
  const std::string prefix = target.rfind("compute_", 0) == 0 ? "compute_" : "sm_";
  if (target.rfind(prefix, 0) != 0)
    return false;
  parsed.ptx = prefix == "compute_";
  const char *begin = target.data() + prefix.size();
  const char *end = target.data() + target.size();
  auto [rest, error] = std::from_chars(begin, end, parsed.number);
  parsed.suffix.assign(rest, end);
  return error == std::errc() && rest != begin;
}

std::string describeModules(const std::vector<KernelModuleRef> &modules) {
  std::string list;
  for (const KernelModuleRef &m : modules)
    list += (list.empty() ? "" : ", ") + m.target +
            (m.format == schema::KernelFormat::Ptx ? " (PTX)" : " (CUBIN)");
  return list.empty() ? "none" : list;
}

class CudaPreparedOp final : public PreparedOp {
public:
  CudaPreparedOp(BoundOp bound, std::vector<CUfunction> functions)
      : bound_(std::move(bound)), functions_(std::move(functions)) {}
  explicit CudaPreparedOp(std::unique_ptr<PreparedOp> linear) : linear_(std::move(linear)) {}
  BoundOp bound_;
  std::vector<CUfunction> functions_;  // indexed like kernelSymbols(op)
  std::unique_ptr<PreparedOp> linear_; // a Linear: CudaLinear runs it
  std::unique_ptr<GemvPlan> gemv_;     // a Linear's buckets that run on its GEMV kernel instead
  CUfunction gemvFunction_ = nullptr;
  std::unique_ptr<QuantLinearPlan> quant_; // a Linear with a quantized W (cuda_quant_linear.h)
  CUfunction quantGemv_ = nullptr, quantGemm_ = nullptr, dequant_ = nullptr;
};

// An instantiated CUDA graph. Destroyed before its device (the executor owns both in that order).
class CudaCapturedProgram final : public CapturedProgram {
public:
  CudaCapturedProgram(std::shared_ptr<const CudaDriver> driver, CUcontext context, CUgraphExec exec)
      : driver_(std::move(driver)), context_(context), exec_(exec) {}
  ~CudaCapturedProgram() override {
    if (driver_->ctxSetCurrent(context_) == CUDA_SUCCESS)
      driver_->graphExecDestroy(exec_);
  }
  CUgraphExec exec() const { return exec_; }

private:
  std::shared_ptr<const CudaDriver> driver_;
  CUcontext context_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// CUDA events recorded on the device's stream. Destroyed before its device.
class CudaClock final : public DeviceClock {
public:
  CudaClock(std::shared_ptr<const CudaDriver> driver, CUcontext context, CUstream stream)
      : driver_(std::move(driver)), context_(context), stream_(stream) {}
  ~CudaClock() override {
    if (driver_->ctxSetCurrent(context_) == CUDA_SUCCESS)
      for (CUevent event : events_)
        driver_->eventDestroy(event);
  }
  Status create(size_t marks) {
    KILN_RETURN_IF_ERROR(driver_->check(driver_->ctxSetCurrent(context_), "cuCtxSetCurrent"));
    for (size_t i = 0; i < marks; ++i) {
      CUevent event = nullptr;
      KILN_RETURN_IF_ERROR(
          driver_->check(driver_->eventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"));
      events_.push_back(event);
    }
    return okStatus();
  }
  size_t size() const override { return events_.size(); }
  Status mark(size_t index) override {
    if (index >= events_.size())
      return outOfRange("clock mark " + std::to_string(index) + " of " +
                        std::to_string(events_.size()));
    KILN_RETURN_IF_ERROR(driver_->check(driver_->ctxSetCurrent(context_), "cuCtxSetCurrent"));
    return driver_->check(driver_->eventRecord(events_[index], stream_), "cuEventRecord");
  }
  Result<double> millisBetween(size_t from, size_t to) const override {
    if (from >= events_.size() || to >= events_.size())
      return outOfRange("clock marks " + std::to_string(from) + " and " + std::to_string(to) +
                        " of " + std::to_string(events_.size()));
    KILN_RETURN_IF_ERROR(driver_->check(driver_->ctxSetCurrent(context_), "cuCtxSetCurrent"));
    float millis = 0;
    KILN_RETURN_IF_ERROR(driver_->check(
        driver_->eventElapsedTime(&millis, events_[from], events_[to]), "cuEventElapsedTime"));
    return static_cast<double>(millis);
  }

private:
  std::shared_ptr<const CudaDriver> driver_;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

CUdeviceptr devicePtr(const void *p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

} // namespace

std::string smTargetName(int major, int minor) {
  const int sm = major * 10 + minor;
  return "sm_" + std::to_string(sm) + (major == 9 || major == 10 ? "a" : "");
}

Result<size_t> selectKernelModule(int major, int minor,
                                  const std::vector<KernelModuleRef> &modules) {
  const int sm = major * 10 + minor;
  std::optional<size_t> sameMajor, ptx;
  int sameMajorNumber = -1, ptxNumber = -1;
  for (size_t i = 0; i < modules.size(); ++i) {
    ParsedTarget t;
    if (!parseTarget(modules[i].target, t) ||
        t.ptx != (modules[i].format == schema::KernelFormat::Ptx))
      continue;
    if (!t.ptx && t.number == sm)
      return i;
    // Arch-specific ("a") code runs only on its own SM; plain and family ("f") code runs on
    // later minors of the same major (CUBIN) or any later SM (PTX, JIT-compiled).
    const bool portable = t.suffix.empty() || t.suffix == "f";
    if (!t.ptx && portable && t.number / 10 == major && t.number < sm && t.number > sameMajorNumber)
      sameMajor = i, sameMajorNumber = t.number;
    if (t.ptx && (t.number == sm || (t.suffix.empty() && t.number < sm)) && t.number > ptxNumber)
      ptx = i, ptxNumber = t.number;
  }
  if (sameMajor)
    return *sameMajor;
  if (ptx)
    return *ptx;
  return failedPrecondition("the artifact has no kernels for this GPU: it is sm_" +
                            std::to_string(sm) + " (compute capability " + std::to_string(major) +
                            "." + std::to_string(minor) + "), the artifact's kernel modules are " +
                            describeModules(modules) + "; recompile with --target " +
                            smTargetName(major, minor));
}

Result<std::unique_ptr<Device>> createCudaDevice(const CudaDeviceOptions &options) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const CudaDriver> driver,
                        CudaDriver::load(options.driverLibrary));
  CUresult rc = driver->init(0);
  if (rc == CUDA_ERROR_NO_DEVICE)
    return unavailable("no CUDA device: the driver (" + options.driverLibrary +
                       ") sees no GPU (cuInit: " + driver->describe(rc) + ")");
  if (rc != CUDA_SUCCESS)
    return unavailable("cuInit failed: " + driver->describe(rc) + " (driver " +
                       options.driverLibrary + ")");
  int count = 0;
  KILN_RETURN_IF_ERROR(driver->check(driver->deviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0)
    return unavailable("no CUDA device: the driver (" + options.driverLibrary + ") sees no GPU");
  if (options.ordinal < 0 || options.ordinal >= count)
    return invalidArgument("CUDA device " + std::to_string(options.ordinal) +
                           " requested; this machine has " + std::to_string(count));
  std::unique_ptr<CudaDevice> device(new CudaDevice(std::move(driver)));
  device->cublasLtLibraries_ = options.cublasLtLibraries;
  device->autotuneLinear_ = options.autotuneLinear;
  device->gemvMode_ = options.linearGemv;
  device->overlapGemv_ = options.overlapGemv;
  KILN_ASSIGN_OR_RETURN(device->quantGemmMode_, parseQuantGemmMode(options.quantGemm));
  KILN_RETURN_IF_ERROR(device->open(options.ordinal));
  return std::unique_ptr<Device>(std::move(device));
}

CudaDevice::CudaDevice(std::shared_ptr<const CudaDriver> driver) : driver_(std::move(driver)) {}

Status CudaDevice::open(int ordinal) {
  const CudaDriver &d = *driver_;
  KILN_RETURN_IF_ERROR(d.check(d.deviceGet(&device_, ordinal), "cuDeviceGet"));
  int major = 0, minor = 0;
  KILN_RETURN_IF_ERROR(
      d.check(d.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
              "cuDeviceGetAttribute(compute capability major)"));
  KILN_RETURN_IF_ERROR(
      d.check(d.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
              "cuDeviceGetAttribute(compute capability minor)"));
  target_ = smTargetName(major, minor);
  constexpr int kProgrammaticLaunchMajor = 9; // griddepcontrol: sm_90 and later
  overlapGemv_ = overlapGemv_ && major >= kProgrammaticLaunchMajor;
  char gpuName[256] = {};
  KILN_RETURN_IF_ERROR(
      d.check(d.deviceGetName(gpuName, sizeof(gpuName) - 1, device_), "cuDeviceGetName"));
  name_ = "cuda:" + std::to_string(ordinal) + " (" + gpuName + ", " + target_ + ")";
  // The primary context is the one cudart and cuBLASLt use, so later library ops share it.
  KILN_RETURN_IF_ERROR(
      d.check(d.devicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain"));
  KILN_RETURN_IF_ERROR(makeCurrent());
  return d.check(d.streamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

CudaDevice::~CudaDevice() {
  if (!context_)
    return;
  // Teardown errors cannot be reported from a destructor; the context release frees the rest.
  (void)makeCurrent();
  if (stream_)
    driver_->streamSynchronize(stream_);
  linear_.reset(); // its cuBLASLt handle, while the context lives
  free(linearWorkspace_);
  free(dequantWorkspace_);
  free(l2Flush_);
  for (DeviceMemory &bias : convertedBiases_)
    free(bias);
  free(opScratch_);
  if (module_)
    driver_->moduleUnload(module_);
  if (stream_)
    driver_->streamDestroy(stream_);
  driver_->devicePrimaryCtxRelease(device_);
}

// The context is current per thread; the engine thread is not the one that created the device.
Status CudaDevice::makeCurrent() const {
  return driver_->check(driver_->ctxSetCurrent(context_), "cuCtxSetCurrent");
}

Result<DeviceMemoryInfo> CudaDevice::memoryInfo() const {
  KILN_RETURN_IF_ERROR(makeCurrent());
  DeviceMemoryInfo info;
  KILN_RETURN_IF_ERROR(
      driver_->check(driver_->memGetInfo(&info.freeBytes, &info.totalBytes), "cuMemGetInfo"));
  return info;
}

Result<DeviceMemory> CudaDevice::allocate(size_t bytes, MemoryKind kind) {
  KILN_RETURN_IF_ERROR(makeCurrent());
  DeviceMemory memory;
  memory.kind = kind;
  memory.bytes = bytes;
  if (bytes == 0)
    return memory;
  // Host-visible buffers (step inputs) are device memory too: the executor only writes them
  // through copyToDevice, and kernels then read them at device bandwidth.
  CUdeviceptr ptr = 0;
  CUresult rc = driver_->memAlloc(&ptr, bytes);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY)
    return resourceExhausted("cuda: out of device memory allocating " + std::to_string(bytes) +
                             " bytes on " + name_);
  KILN_RETURN_IF_ERROR(driver_->check(rc, "cuMemAlloc(" + std::to_string(bytes) + ")"));
  memory.data = reinterpret_cast<void *>(ptr);
  // Zeroed like the cpu backend's memory, so no step reads stale bytes as values.
  KILN_RETURN_IF_ERROR(
      driver_->check(driver_->memsetD8Async(ptr, 0, bytes, stream_), "cuMemsetD8Async"));
  return memory;
}

void CudaDevice::free(DeviceMemory &memory) {
  if (memory.data && !memory.borrowed && makeCurrent().isOk())
    driver_->memFree(devicePtr(memory.data));
  memory = DeviceMemory();
}

Result<DeviceMemory> CudaDevice::importWeights(std::span<const uint8_t> hostBytes) {
  KILN_ASSIGN_OR_RETURN(DeviceMemory memory, allocate(hostBytes.size(), MemoryKind::kDevice));
  if (hostBytes.empty())
    return memory;
  // On the device's stream, not cuMemcpyHtoD: that runs on the legacy default stream, which a
  // CU_STREAM_NON_BLOCKING stream does not wait for, so allocate()'s zeroing could land after the
  // weights and kernels could read them before they arrived. Synchronized so a failure is
  // reported here, at load.
  Status copied = copyToDevice(memory.data, hostBytes.data(), hostBytes.size());
  if (copied.isOk())
    copied = synchronize();
  if (!copied.isOk()) {
    free(memory);
    return copied.withContext("copying " + std::to_string(hostBytes.size()) + " bytes of weights");
  }
  return memory;
}

Status CudaDevice::copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) {
  if (bytes == 0)
    return okStatus();
  KILN_RETURN_IF_ERROR(makeCurrent());
  // Pageable sources are staged by the driver before this returns, so the caller may reuse them.
  return driver_->check(driver_->memcpyHtoDAsync(devicePtr(deviceDst), hostSrc, bytes, stream_),
                        "cuMemcpyHtoDAsync");
}

Status CudaDevice::copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) {
  if (bytes == 0)
    return okStatus();
  KILN_RETURN_IF_ERROR(makeCurrent());
  KILN_RETURN_IF_ERROR(
      driver_->check(driver_->memcpyDtoHAsync(hostDst, devicePtr(deviceSrc), bytes, stream_),
                     "cuMemcpyDtoHAsync"));
  return synchronize();
}

Status CudaDevice::synchronize() {
  KILN_RETURN_IF_ERROR(makeCurrent());
  return driver_->check(driver_->streamSynchronize(stream_), "cuStreamSynchronize");
}

Status CudaDevice::loadKernelModules(const schema::Plan &plan) {
  KILN_RETURN_IF_ERROR(makeCurrent());
  std::vector<KernelModuleRef> refs;
  if (plan.kernel_modules())
    for (const schema::KernelModule *m : *plan.kernel_modules())
      refs.push_back({m->target() ? m->target()->str() : "", m->format()});
  int major = 0, minor = 0;
  driver_->deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
  driver_->deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  KILN_ASSIGN_OR_RETURN(size_t index, selectKernelModule(major, minor, refs));
  const schema::KernelModule &chosen = *plan.kernel_modules()->Get(static_cast<unsigned>(index));
  if (!chosen.image() || chosen.image()->size() == 0)
    return dataLoss("kernel module " + refs[index].target + " has an empty image");
  // FlatBuffers gives byte alignment only; the loader parses ELF headers in place.
  std::vector<uint64_t> aligned((chosen.image()->size() + 8) / 8, 0);
  std::memcpy(aligned.data(), chosen.image()->data(), chosen.image()->size());
  char log[8192] = {};
  CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(static_cast<uintptr_t>(sizeof(log) - 1))};
  CUmodule module = nullptr;
  CUresult rc = driver_->moduleLoadDataEx(&module, aligned.data(), 2, keys, values);
  if (rc != CUDA_SUCCESS)
    return internalError("cuModuleLoadDataEx(" + refs[index].target + ") failed on " + name_ +
                         ": " + driver_->describe(rc) +
                         (log[0] ? std::string("; log: ") + log : ""));
  if (module_)
    driver_->moduleUnload(module_);
  module_ = module;
  moduleTarget_ = refs[index].target;
  planHasGemv_ = planGemvUsable(plan.schema_version());
  dequantBytes_ = dequantWorkspaceBytes(plan);
  functions_.clear();
  Result<CUfunction> argmax = function(kernels::cuda::kArgmaxRowsSymbol);
  argmaxFunction_ = argmax.isOk() ? *argmax : nullptr;
  return okStatus();
}

Status CudaDevice::argmaxRows(const void *logits, int32_t rows, int32_t vocab, void *ids) {
  if (!argmaxFunction_)
    return Device::argmaxRows(logits, rows, vocab, ids);
  if (rows <= 0)
    return okStatus();
  kernels::cuda::ArgmaxRowsParams params{static_cast<const float *>(logits),
                                         static_cast<int32_t *>(ids), rows, vocab};
  void *args[] = {&params};
  CUresult rc =
      driver_->launchKernel(argmaxFunction_, static_cast<unsigned>(rows), 1, 1,
                            kernels::cuda::kArgmaxThreads, 1, 1, 0, stream_, args, nullptr);
  return driver_->check(rc, "cuLaunchKernel for the argmax of " + std::to_string(rows) +
                                " logits rows");
}

Result<CUfunction> CudaDevice::function(const std::string &symbol) const {
  if (auto it = functions_.find(symbol); it != functions_.end())
    return it->second;
  CUfunction fn = nullptr;
  CUresult rc = driver_->moduleGetFunction(&fn, module_, symbol.c_str());
  if (rc != CUDA_SUCCESS)
    return dataLoss("kernel '" + symbol + "' is not in the artifact's " + moduleTarget_ +
                    " module (" + driver_->describe(rc) + ")");
  const_cast<std::map<std::string, CUfunction> &>(functions_)[symbol] = fn;
  return fn;
}

Status CudaDevice::ensureOpScratch(size_t bytes) {
  if (bytes <= opScratch_.bytes)
    return okStatus();
  free(opScratch_);
  KILN_ASSIGN_OR_RETURN(opScratch_, allocate(bytes, MemoryKind::kDevice));
  return okStatus();
}

Status CudaDevice::ensureCudaLinear() {
  if (!linear_) {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const CublasLt> lt, CublasLt::load(cublasLtLibraries_));
    if (!linearWorkspace_.data) {
      KILN_ASSIGN_OR_RETURN(linearWorkspace_, allocate(kLinearWorkspaceBytes, MemoryKind::kDevice));
    }
    LinearTimer timer;
    if (autotuneLinear_)
      timer = [this](const std::function<Status(CUstream)> &work) {
        return timeLinearCandidate(work);
      };
    KILN_ASSIGN_OR_RETURN(linear_, CudaLinear::create(std::move(lt), linearWorkspace_.data,
                                                      linearWorkspace_.bytes, std::move(timer)));
  }
  return okStatus();
}

Result<std::unique_ptr<PreparedOp>> CudaDevice::prepareLinear(const BoundOp &op) {
  KILN_RETURN_IF_ERROR(makeCurrent());
  KILN_RETURN_IF_ERROR(ensureCudaLinear());
  if (isQuantLinear(op))
    return prepareQuantLinear(op);
  KILN_ASSIGN_OR_RETURN(GemmDesc gemm, describeLinear(op));
  BoundOp bound = op;
  if (gemm.convertBias) {
    KILN_ASSIGN_OR_RETURN(bound.inputs[2], convertBias(op.inputs[2], op.outputs[0].dtype));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PreparedOp> linear, linear_->prepare(bound));
  auto prepared = std::make_unique<CudaPreparedOp>(std::move(linear));
  KILN_RETURN_IF_ERROR(prepareGemv(op, *prepared));
  return std::unique_ptr<PreparedOp>(std::move(prepared));
}

// The GEMV on the packed W for decode rows; for more, per row bucket the tile GEMM or cuBLASLt on
// W dequantized into the device's workspace (sized at loadKernelModules for the plan's largest
// quantized W), as quantGemmMode_ says (cuda_quant_linear.h).
Result<std::unique_ptr<PreparedOp>> CudaDevice::prepareQuantLinear(const BoundOp &op) {
  if (!module_)
    return failedPrecondition("cuda backend: no kernel module loaded on " + name_ +
                              ": call CudaDevice::loadKernelModules(plan) before preparing ops");
  const bool asksTiles = quantGemmMode_ == QuantGemmMode::kTiles;
  KILN_ASSIGN_OR_RETURN(QuantLinearPlan plan, planQuantLinear(op, nullptr, asksTiles));
  const bool hasTiles = !plan.gemmSymbol.empty();
  const bool tilesOnly = hasTiles && asksTiles;
  std::unique_ptr<PreparedOp> linear;
  if (!tilesOnly) {
    const uint64_t needed = static_cast<uint64_t>(op.inputs[1].fixedRows * op.inputs[1].width) *
                            dtypeSize(op.inputs[0].dtype);
    if (needed > dequantBytes_)
      return failedPrecondition("cuda backend: " + opLabel(*op.op) + ": its W takes " +
                                std::to_string(needed) + " bytes dequantized, more than the " +
                                std::to_string(dequantBytes_) + " the loaded plan asked for");
    if (!dequantWorkspace_.data) {
      KILN_ASSIGN_OR_RETURN(dequantWorkspace_, allocate(dequantBytes_, MemoryKind::kDevice));
    }
    plan.dequant.out = dequantWorkspace_.data;
    BoundOp bound = dequantizedLinear(op, dequantWorkspace_.data);
    KILN_ASSIGN_OR_RETURN(GemmDesc gemm, describeLinear(bound));
    if (gemm.convertBias) {
      KILN_ASSIGN_OR_RETURN(bound.inputs[2], convertBias(op.inputs[2], op.outputs[0].dtype));
    }
    KILN_ASSIGN_OR_RETURN(linear, linear_->prepare(bound));
  }
  auto prepared = std::make_unique<CudaPreparedOp>(std::move(linear));
  KILN_ASSIGN_OR_RETURN(prepared->quantGemv_, function(plan.gemvSymbol));
  if (hasTiles) {
    KILN_ASSIGN_OR_RETURN(prepared->quantGemm_, function(plan.gemmSymbol));
  }
  if (!tilesOnly) {
    KILN_ASSIGN_OR_RETURN(prepared->dequant_, function(plan.dequantSymbol));
  }
  prepared->quant_ = std::make_unique<QuantLinearPlan>(std::move(plan));
  if (hasTiles && quantGemmMode_ == QuantGemmMode::kAuto && autotuneLinear_)
    KILN_RETURN_IF_ERROR(timeQuantPaths(*prepared));
  return std::unique_ptr<PreparedOp>(std::move(prepared));
}

// Per row bucket of more than kGemvMaxRows rows: the dequantize + cuBLASLt path and the tile GEMM
// timed on the op's own buffers (as prepareGemv times the GEMV), the tile GEMM kept where it is
// clearly faster.
Status CudaDevice::timeQuantPaths(PreparedOp &prepared) {
  QuantLinearPlan &plan = *static_cast<CudaPreparedOp &>(prepared).quant_;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    if (plan.buckets[b] <= uint64_t(kernels::cuda::kGemvMaxRows))
      continue;
    const auto rows = static_cast<int32_t>(plan.buckets[b]);
    const StepCounts counts{rows, rows, rows, rows};
    std::vector<double> millis;
    for (bool tiles : {false, true}) {
      Result<double> ms = timeLinearCandidate(
          [&](CUstream) { return runQuantRows(prepared, rows, tiles, counts); });
      millis.push_back(ms.isOk() ? *ms : -1.0);
    }
    plan.tilesForBucket[b] = pickTimedAlgorithm(millis) == 1;
  }
  return okStatus();
}

Status CudaDevice::runQuantRows(const PreparedOp &prepared, int64_t rows, bool tiles,
                                const StepCounts &counts) {
  const auto &op = static_cast<const CudaPreparedOp &>(prepared);
  const QuantLinearPlan &plan = *op.quant_;
  if (tiles) {
    CudaLaunch gemm = quantGemmLaunch(plan, static_cast<int32_t>(rows));
    return launchPlain(op.quantGemm_, gemm, "a quantized tile GEMM Linear");
  }
  CudaLaunch dequant = dequantLaunch(plan);
  KILN_RETURN_IF_ERROR(launchPlain(op.dequant_, dequant, "a Linear's W dequantization"));
  return linear_->run(*op.linear_, counts, stream_);
}

Status CudaDevice::launchPlain(CUfunction function, CudaLaunch &launch, const std::string &what) {
  void *args[] = {launch.params.data()};
  CUresult rc =
      driver_->launchKernel(function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block,
                            1, 1, launch.sharedBytes, stream_, args, nullptr);
  return driver_->check(rc, "cuLaunchKernel for " + what);
}

Status CudaDevice::runQuantLinear(const PreparedOp &prepared, const StepCounts &counts) {
  const auto &op = static_cast<const CudaPreparedOp &>(prepared);
  const QuantLinearPlan &plan = *op.quant_;
  const int64_t rows = counts.rows(plan.rowsRule, plan.maxRows);
  if (rows <= 0)
    return okStatus();
  if (rows <= kernels::cuda::kGemvMaxRows) {
    CudaLaunch gemv = quantGemvLaunch(plan, static_cast<int32_t>(rows));
    return launchPlain(op.quantGemv_, gemv, "a quantized GEMV Linear");
  }
  return runQuantRows(prepared, rows, quantUsesTiles(plan, rows), counts);
}

// Per row bucket of at most kGemvMaxRows rows: cuBLASLt and the kernel at each W-rows-per-warp
// choice timed on the op's own buffers (what autotuning does for cuBLASLt's candidates); the
// kernel kept where it is clearly faster, at its fastest choice.
Status CudaDevice::prepareGemv(const BoundOp &op, PreparedOp &preparedOp) {
  auto &prepared = static_cast<CudaPreparedOp &>(preparedOp);
  const std::string symbol = gemvSymbol(op);
  const bool timed = gemvMode_ == GemvMode::kAuto && autotuneLinear_;
  if (symbol.empty() || !module_ || !planHasGemv_ || !(timed || gemvMode_ == GemvMode::kAlways))
    return okStatus();
  KILN_ASSIGN_OR_RETURN(CUfunction function, this->function(symbol));
  auto plan = std::make_unique<GemvPlan>(planGemv(op));
  const std::vector<uint64_t> buckets = linearRowBuckets(static_cast<uint64_t>(plan->maxRows));
  for (size_t b = 0; b < buckets.size() && buckets[b] <= uint64_t(kernels::cuda::kGemvMaxRows);
       ++b) {
    const auto rows = static_cast<int32_t>(buckets[b]);
    if (!timed) {
      plan->outsPerWarpForBucket[b] = defaultGemvOutsPerWarp(plan->params.out);
      continue;
    }
    const StepCounts counts{rows, rows, rows, rows};
    Result<double> library = timeLinearCandidate(
        [&](CUstream stream) { return linear_->run(*prepared.linear_, counts, stream); });
    std::vector<double> millis = {library.isOk() ? *library : -1.0};
    for (int32_t outs = 1; outs <= kernels::cuda::kGemvMaxOutputsPerWarp; ++outs) {
      Result<double> kernel =
          timeLinearCandidate([&](CUstream) { return launchGemv(function, *plan, rows, outs); });
      millis.push_back(kernel.isOk() ? *kernel : -1.0);
    }
    plan->outsPerWarpForBucket[b] = static_cast<int32_t>(pickTimedAlgorithm(millis));
  }
  prepared.gemvFunction_ = function;
  prepared.gemv_ = std::move(plan);
  return okStatus();
}

Status CudaDevice::launchGemv(CUfunction function, const GemvPlan &plan, int32_t rows,
                              int32_t outsPerWarp) {
  CudaLaunch launch = gemvLaunch(plan, rows, outsPerWarp);
  void *args[] = {launch.params.data()};
  CUlaunchAttribute overlap{};
  overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  overlap.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = launch.grid[0];
  config.gridDimY = launch.grid[1];
  config.gridDimZ = launch.grid[2];
  config.blockDimX = launch.block;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = launch.sharedBytes;
  config.hStream = stream_;
  config.attrs = overlapGemv_ ? &overlap : nullptr;
  config.numAttrs = overlapGemv_ ? 1 : 0;
  CUresult rc = driver_->launchKernelEx(&config, function, args, nullptr);
  return driver_->check(rc, "cuLaunchKernelEx for a GEMV Linear (" + std::to_string(rows) +
                                " rows" + (overlapGemv_ ? ", overlapping the kernel before" : "") +
                                ")");
}

// One warm-up run (first-call setup, clocks), then the mean of a few, each timed alone after the
// L2 cache was overwritten: a decode step streams 32 layers' weights through L2, so every Linear
// meets its W in HBM, while back-to-back runs would read a W that fits L2 (an 8B model's qkv and
// o on an H200) from L2 and rank the candidates by a speed no step sees.
Result<double> CudaDevice::timeLinearCandidate(const std::function<Status(CUstream)> &work) {
  constexpr int kRuns = 3;
  KILN_RETURN_IF_ERROR(work(stream_));
  KILN_RETURN_IF_ERROR(ensureL2Flush());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock, createClock(2 * kRuns));
  for (int i = 0; i < kRuns; ++i) {
    KILN_RETURN_IF_ERROR(
        driver_->check(driver_->memsetD8Async(reinterpret_cast<CUdeviceptr>(l2Flush_.data), 0,
                                              l2Flush_.bytes, stream_),
                       "cuMemsetD8Async (overwriting L2 before a timed Linear)"));
    KILN_RETURN_IF_ERROR(clock->mark(2 * i));
    KILN_RETURN_IF_ERROR(work(stream_));
    KILN_RETURN_IF_ERROR(clock->mark(2 * i + 1));
  }
  KILN_RETURN_IF_ERROR(synchronize());
  double total = 0;
  for (int i = 0; i < kRuns; ++i) {
    KILN_ASSIGN_OR_RETURN(double millis, clock->millisBetween(2 * i, 2 * i + 1));
    total += millis;
  }
  return total / kRuns;
}

// Twice the L2 cache (at least 8 MiB), allocated with the first timed Linear, kept for the rest.
Status CudaDevice::ensureL2Flush() {
  if (l2Flush_.data)
    return okStatus();
  int l2Bytes = 0;
  KILN_RETURN_IF_ERROR(driver_->check(
      driver_->deviceGetAttribute(&l2Bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device_),
      "cuDeviceGetAttribute(L2 cache size)"));
  constexpr size_t kMinBytes = size_t(8) << 20;
  const size_t bytes = std::max(kMinBytes, 2 * static_cast<size_t>(std::max(l2Bytes, 0)));
  KILN_ASSIGN_OR_RETURN(l2Flush_, allocate(bytes, MemoryKind::kDevice));
  return okStatus();
}

// An F32 bias as `dtype` in device memory the device keeps (GemmDesc::convertBias).
Result<BoundBuffer> CudaDevice::convertBias(const BoundBuffer &bias, schema::DType dtype) {
  const size_t count = static_cast<size_t>(bias.fixedRows * bias.width);
  std::vector<float> values(count);
  KILN_RETURN_IF_ERROR(copyToHost(values.data(), bias.data, count * sizeof(float)));
  std::vector<uint16_t> converted(count);
  for (size_t i = 0; i < count; ++i)
    converted[i] = dtype == schema::DType::BF16 ? f32ToBf16(values[i]) : f32ToF16(values[i]);
  KILN_ASSIGN_OR_RETURN(DeviceMemory memory,
                        allocate(count * sizeof(uint16_t), MemoryKind::kDevice));
  convertedBiases_.push_back(memory);
  KILN_RETURN_IF_ERROR(copyToDevice(memory.data, converted.data(), memory.bytes));
  BoundBuffer out = bias;
  out.data = memory.data;
  out.dtype = dtype;
  return out;
}

Result<std::unique_ptr<PreparedOp>> CudaDevice::prepareOp(const BoundOp &op) {
  if (op.op && op.op->params_type() == schema::OpParams::LinearParams)
    return prepareLinear(op);
  KILN_RETURN_IF_ERROR(checkCudaOp(op));
  if (!module_)
    return failedPrecondition("cuda backend: no kernel module loaded on " + name_ +
                              ": call CudaDevice::loadKernelModules(plan) before preparing ops");
  KILN_RETURN_IF_ERROR(makeCurrent());
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> symbols, kernelSymbols(op));
  std::vector<CUfunction> functions;
  for (const std::string &symbol : symbols) {
    KILN_ASSIGN_OR_RETURN(CUfunction fn, function(symbol));
    functions.push_back(fn);
  }
  // Allocated while preparing (at load), never during a step.
  KILN_RETURN_IF_ERROR(ensureOpScratch(opScratchBytes(op)));
  return std::unique_ptr<PreparedOp>(std::make_unique<CudaPreparedOp>(op, std::move(functions)));
}

Status CudaDevice::runOp(const PreparedOp &prepared, const StepCounts &counts) {
  // Only this device prepares the ops it runs, so the downcast is safe.
  const auto &op = static_cast<const CudaPreparedOp &>(prepared);
  KILN_RETURN_IF_ERROR(makeCurrent());
  if (op.quant_)
    return runQuantLinear(prepared, counts);
  if (op.linear_) {
    if (op.gemv_) {
      const int64_t rows = counts.rows(op.gemv_->rowsRule, op.gemv_->maxRows);
      if (const int32_t outs = gemvOutsPerWarp(*op.gemv_, rows); outs > 0)
        return launchGemv(op.gemvFunction_, *op.gemv_, static_cast<int32_t>(rows), outs);
    }
    return linear_->run(*op.linear_, counts, stream_);
  }
  const OpScratch scratch{opScratch_.data};
  for (CudaLaunch &launch : planLaunches(op.bound_, counts, scratch)) {
    void *args[] = {launch.params.data()};
    CUresult rc = driver_->launchKernel(op.functions_[launch.kernel], launch.grid[0],
                                        launch.grid[1], launch.grid[2], launch.block, 1, 1,
                                        launch.sharedBytes, stream_, args, nullptr);
    if (rc != CUDA_SUCCESS)
      return internalError("cuLaunchKernel for op '" +
                           (op.bound_.op->name() ? op.bound_.op->name()->str() : std::string()) +
                           "' failed: " + driver_->describe(rc));
  }
  return okStatus();
}

std::string CudaDevice::describeOp(const PreparedOp &prepared, const StepCounts &counts) const {
  const auto &op = static_cast<const CudaPreparedOp &>(prepared);
  if (op.quant_) {
    const int64_t rows = counts.rows(op.quant_->rowsRule, op.quant_->maxRows);
    if (rows < 1)
      return "";
    if (rows <= kernels::cuda::kGemvMaxRows)
      return "gemv quantized";
    if (quantUsesTiles(*op.quant_, rows))
      return "tile gemm quantized";
    return "dequantize + " + CudaLinear::describe(*op.linear_, counts);
  }
  if (!op.linear_)
    return "";
  if (op.gemv_) {
    const int32_t outs =
        gemvOutsPerWarp(*op.gemv_, counts.rows(op.gemv_->rowsRule, op.gemv_->maxRows));
    if (outs > 0)
      return "gemv " + std::to_string(outs) + "/warp";
  }
  return CudaLinear::describe(*op.linear_, counts);
}

Status CudaDevice::beginCapture() {
  KILN_RETURN_IF_ERROR(makeCurrent());
  // Thread-local: only this thread's unsafe calls (allocation, synchronous copies) are refused
  // while capturing; other devices' threads keep working.
  return driver_->check(driver_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                        "cuStreamBeginCapture on " + name_);
}

Result<std::unique_ptr<CapturedProgram>> CudaDevice::endCapture() {
  KILN_RETURN_IF_ERROR(makeCurrent());
  CUgraph graph = nullptr;
  KILN_RETURN_IF_ERROR(
      driver_->check(driver_->streamEndCapture(stream_, &graph), "cuStreamEndCapture on " + name_));
  CUgraphExec exec = nullptr;
  CUresult rc = driver_->graphInstantiate(&exec, graph, 0);
  // The executable graph is independent of the graph it was made from.
  driver_->graphDestroy(graph);
  KILN_RETURN_IF_ERROR(driver_->check(rc, "cuGraphInstantiate on " + name_));
  return std::unique_ptr<CapturedProgram>(
      std::make_unique<CudaCapturedProgram>(driver_, context_, exec));
}

Status CudaDevice::replay(const CapturedProgram &program) {
  KILN_RETURN_IF_ERROR(makeCurrent());
  // Only endCapture makes the programs handed back here.
  const auto &graph = static_cast<const CudaCapturedProgram &>(program);
  return driver_->check(driver_->graphLaunch(graph.exec(), stream_), "cuGraphLaunch on " + name_);
}

Result<std::unique_ptr<DeviceClock>> CudaDevice::createClock(size_t marks) {
  auto clock = std::make_unique<CudaClock>(driver_, context_, stream_);
  KILN_RETURN_IF_ERROR(clock->create(marks));
  return std::unique_ptr<DeviceClock>(std::move(clock));
}

} // namespace kiln::rt
