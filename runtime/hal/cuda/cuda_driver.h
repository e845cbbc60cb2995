// The CUDA driver API, loaded at run time with dlopen + dlsym so that a kiln built with the CUDA
// backend starts on machines without an NVIDIA driver and says "no GPU" instead of failing to
// load (linking -lcuda would make the binary exit 127 there). cuda.h is used for its types only.
// Versioned entry points are resolved by their exported names (cuMemAlloc_v2, ...), the ones the
// cuda.h macros select for this toolkit.
#pragma once

#include "runtime/base/shared_library.h"
#include "runtime/base/status.h"

#include <cuda.h>

#include <memory>
#include <string>

namespace kiln::rt {

// X(member, exported symbol, the cuda.h declaration that gives the member's type)
#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                                              \
  X(init, "cuInit", cuInit)                                                                        \
  X(driverGetVersion, "cuDriverGetVersion", cuDriverGetVersion)                                    \
  X(getErrorName, "cuGetErrorName", cuGetErrorName)                                                \
  X(getErrorString, "cuGetErrorString", cuGetErrorString)                                          \
  X(deviceGetCount, "cuDeviceGetCount", cuDeviceGetCount)                                          \
  X(deviceGet, "cuDeviceGet", cuDeviceGet)                                                         \
  X(deviceGetName, "cuDeviceGetName", cuDeviceGetName)                                             \
  X(deviceGetAttribute, "cuDeviceGetAttribute", cuDeviceGetAttribute)                              \
  X(devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)                  \
  X(devicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease)            \
  X(ctxSetCurrent, "cuCtxSetCurrent", cuCtxSetCurrent)                                             \
  X(streamCreate, "cuStreamCreate", cuStreamCreate)                                                \
  X(streamDestroy, "cuStreamDestroy_v2", cuStreamDestroy)                                          \
  X(streamSynchronize, "cuStreamSynchronize", cuStreamSynchronize)                                 \
  X(streamQuery, "cuStreamQuery", cuStreamQuery)                                                   \
  X(memGetInfo, "cuMemGetInfo_v2", cuMemGetInfo)                                                   \
  X(memAlloc, "cuMemAlloc_v2", cuMemAlloc)                                                         \
  X(memFree, "cuMemFree_v2", cuMemFree)                                                            \
  X(memHostAlloc, "cuMemHostAlloc", cuMemHostAlloc)                                                \
  X(memFreeHost, "cuMemFreeHost", cuMemFreeHost)                                                   \
  X(memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", cuMemHostGetDevicePointer)            \
  X(memcpyHtoD, "cuMemcpyHtoD_v2", cuMemcpyHtoD)                                                   \
  X(memcpyDtoH, "cuMemcpyDtoH_v2", cuMemcpyDtoH)                                                   \
  X(memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync)                                    \
  X(memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync)                                    \
  X(memsetD8Async, "cuMemsetD8Async", cuMemsetD8Async)                                             \
  X(memcpy2DAsync, "cuMemcpy2DAsync_v2", cuMemcpy2DAsync)                                          \
  X(moduleLoadDataEx, "cuModuleLoadDataEx", cuModuleLoadDataEx)                                    \
  X(moduleUnload, "cuModuleUnload", cuModuleUnload)                                                \
  X(moduleGetFunction, "cuModuleGetFunction", cuModuleGetFunction)                                 \
  X(launchKernel, "cuLaunchKernel", cuLaunchKernel)                                                \
  X(launchKernelEx, "cuLaunchKernelEx", cuLaunchKernelEx)                                          \
  X(streamBeginCapture, "cuStreamBeginCapture_v2", cuStreamBeginCapture)                           \
  X(streamEndCapture, "cuStreamEndCapture", cuStreamEndCapture)                                    \
  X(graphInstantiate, "cuGraphInstantiateWithFlags", cuGraphInstantiate)                           \
  X(graphLaunch, "cuGraphLaunch", cuGraphLaunch)                                                   \
  X(graphExecDestroy, "cuGraphExecDestroy", cuGraphExecDestroy)                                    \
  X(graphDestroy, "cuGraphDestroy", cuGraphDestroy)                                                \
  X(eventCreate, "cuEventCreate", cuEventCreate)                                                   \
  X(eventDestroy, "cuEventDestroy_v2", cuEventDestroy)                                             \
  X(eventRecord, "cuEventRecord", cuEventRecord)                                                   \
  X(eventSynchronize, "cuEventSynchronize", cuEventSynchronize)                                    \
  X(eventElapsedTime, "cuEventElapsedTime", cuEventElapsedTime)

// The resolved entry points. One per process is enough; it is never unloaded while a device
// built on it is alive (devices hold a shared_ptr).
class CudaDriver {
public:
  // dlopen(`library`) and dlsym every entry point; does not call cuInit. Errors: "no CUDA driver
  // found (<library>): this machine has no NVIDIA GPU", or the missing symbol.
  static Result<std::shared_ptr<const CudaDriver>> load(const std::string &library);
  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;

#define KILN_CUDA_DRIVER_MEMBER(member, symbol, decl) decltype(&::decl) member = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DRIVER_MEMBER)
#undef KILN_CUDA_DRIVER_MEMBER

  // OK, or "<what> failed: CUDA_ERROR_X (<description>)".
  Status check(CUresult result, const std::string &what) const;
  std::string describe(CUresult result) const;

private:
  CudaDriver() = default;
  SharedLibrary library_;
};

} // namespace kiln::rt
