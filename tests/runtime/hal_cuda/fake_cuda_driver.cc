// A fake libcuda for CI without a GPU: one sm_90 device whose calls touch no memory and are
// logged, so tests check which stream each copy, memset and graph call of CudaDevice goes to.
// Defines every entry point CudaDriver resolves (cuda.h's macros give the versioned names).
// The log is read with kilnFakeCudaLog and cleared with kilnFakeCudaClear (dlsym).
#include <cuda.h>
// cuda.h maps cuEventElapsedTime to its _v2; kiln resolves the v1 symbol (every driver has it).
#undef cuEventElapsedTime

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

namespace {

std::mutex logMutex;
std::string callLog;
uintptr_t nextAddress = 0x10000000;

// The fake's handles are small integers: the stream created first is "s1", the legacy default
// stream (null) "legacy".
std::string streamName(CUstream stream) {
  return stream ? "s" + std::to_string(reinterpret_cast<uintptr_t>(stream)) : "legacy";
}

void record(const std::string &line) {
  std::lock_guard<std::mutex> lock(logMutex);
  callLog += line + "\n";
}

template <typename Handle> Handle fakeHandle(uintptr_t value) {
  return reinterpret_cast<Handle>(value);
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) size_t kilnFakeCudaLog(char *out, size_t capacity) {
  std::lock_guard<std::mutex> lock(logMutex);
  if (out && capacity > 0) {
    const size_t n = std::min(capacity - 1, callLog.size());
    std::memcpy(out, callLog.data(), n);
    out[n] = '\0';
  }
  return callLog.size();
}

__attribute__((visibility("default"))) void kilnFakeCudaClear() {
  std::lock_guard<std::mutex> lock(logMutex);
  callLog.clear();
}

CUresult CUDAAPI cuInit(unsigned int) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDriverGetVersion(int *version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult, const char **name) {
  *name = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult, const char **text) {
  *text = "fake driver";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int *count) {
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int length, CUdevice) {
  std::strncpy(name, "Fake GPU", static_cast<size_t>(length));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice) {
  *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice) {
  *context = fakeHandle<CUcontext>(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int flags) {
  *stream = fakeHandle<CUstream>(1);
  record("cuStreamCreate flags=" + std::to_string(flags));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  record("cuStreamSynchronize " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  record("cuStreamQuery " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  *freeBytes = size_t(1) << 30;
  *totalBytes = size_t(2) << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(logMutex);
  *ptr = nextAddress;
  nextAddress += (bytes + 255) / 256 * 256 + 256;
  callLog += "cuMemAlloc " + std::to_string(bytes) + "\n";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostAlloc(void **, size_t, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemFreeHost(void *) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *, void *, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr, const void *, size_t bytes) {
  record("cuMemcpyHtoD " + std::to_string(bytes) + " legacy");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr, size_t bytes) {
  std::memset(dst, 0, bytes);
  record("cuMemcpyDtoH " + std::to_string(bytes) + " legacy");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr, const void *, size_t bytes, CUstream stream) {
  record("cuMemcpyHtoDAsync " + std::to_string(bytes) + " " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr, size_t bytes, CUstream stream) {
  std::memset(dst, 0, bytes);
  record("cuMemcpyDtoHAsync " + std::to_string(bytes) + " " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr, unsigned char, size_t bytes, CUstream stream) {
  record("cuMemsetD8Async " + std::to_string(bytes) + " " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *, CUstream stream) {
  record("cuMemcpy2DAsync " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *, unsigned int, CUjit_option *,
                                    void **) {
  *module = fakeHandle<CUmodule>(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule, const char *) {
  *function = fakeHandle<CUfunction>(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, CUstream stream, void **,
                                void **) {
  record("cuLaunchKernel " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction, void **, void **) {
  record("cuLaunchKernelEx " + streamName(config->hStream) +
         " attrs=" + std::to_string(config->numAttrs));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  record("cuStreamBeginCapture " + streamName(stream) + " mode=" + std::to_string(mode));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  *graph = fakeHandle<CUgraph>(7);
  record("cuStreamEndCapture " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
  *exec = fakeHandle<CUgraphExec>(8);
  record("cuGraphInstantiate graph=" + std::to_string(reinterpret_cast<uintptr_t>(graph)) +
         " flags=" + std::to_string(flags));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  record("cuGraphLaunch exec=" + std::to_string(reinterpret_cast<uintptr_t>(exec)) + " " +
         streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  record("cuGraphExecDestroy exec=" + std::to_string(reinterpret_cast<uintptr_t>(exec)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  record("cuGraphDestroy graph=" + std::to_string(reinterpret_cast<uintptr_t>(graph)));
  return CUDA_SUCCESS;
}
// Events: handles and a log line; every elapsed time is 1 ms.
CUresult CUDAAPI cuEventCreate(CUevent *event, unsigned int) {
  *event = fakeHandle<CUevent>(nextAddress++);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent, CUstream stream) {
  record("cuEventRecord " + streamName(stream));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventSynchronize(CUevent) {
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventElapsedTime(float *milliseconds, CUevent, CUevent) {
  *milliseconds = 1.0f;
  return CUDA_SUCCESS;
}

} // extern "C"
