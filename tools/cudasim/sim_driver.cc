// The simulated CUDA driver (libcuda.so.1 for tests without a GPU): every entry point kiln
// resolves (runtime/hal/cuda/cuda_driver.h), on host memory, with the checks a GPU makes.
// This file: initialization, errors, devices, primary contexts and memory. Streams, events,
// capture, graphs and launches: sim_driver_stream.cc; modules: sim_driver_module.cc; shared state:
// sim_driver_state.h.
//
// Environment (read by the first cuInit):
//   KILN_CUDASIM_DEVICES    device count, 0..8 (default 1; 0: cuInit returns NO_DEVICE)
//   KILN_CUDASIM_SM         compute capability as major*10+minor (default 90 -> 9.0); a
//                           comma-separated list gives one per device ("90,80")
//   KILN_CUDASIM_MEMORY_MB  memory per device in MiB (default 1024); also a list
#include "tools/cudasim/sim_driver_state.h"
#include "tools/cudasim/sim_hooks.h"

#include <algorithm>
#include <cstring>

using namespace kiln;
using namespace kiln::cudasim;
using namespace kiln::cudasim::driver;

namespace {

constexpr const char *kDeviceName = "kiln cudasim (CPU)";

// For the hooks of sim_hooks.h: -1, with `text` copied (truncated) into `why`.
int noDevice(const std::string &text, char *why, size_t whyBytes) {
  if (why && whyBytes > 0) {
    size_t n = std::min(text.size(), whyBytes - 1);
    std::memcpy(why, text.data(), n);
    why[n] = '\0';
  }
  return -1;
}

// What cuDeviceGetAttribute reports besides the compute capability: an H100-like GPU, since
// kiln reads these only to size launches. Attributes not listed are 0.
int attributeValue(CUdevice_attribute attribute, const Device &device) {
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    return device.major;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    return device.minor;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    return 64;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    return 0x7fffffff;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    return 48 * 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    return 227 * 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    return 228 * 1024;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
    return 64 * 1024;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    return 32;
  case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
    return 0x7fffffff;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
    return 65536;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
    return 1755000;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
    return 2619000;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
    return 5120;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
    return 50 * 1024 * 1024;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    return 132;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
    return 2048;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
    return 32;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
    return device.ordinal + 1;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    return 1;
  default:
    return 0;
  }
}

CUresult checkDevice(const char *api, CUdevice device, Device **out) {
  if (CUresult rc = checkInitialized(api))
    return rc;
  Driver &d = state();
  if (device < 0 || static_cast<size_t>(device) >= d.devices.size())
    return fail(CUDA_ERROR_INVALID_DEVICE, std::string(api) + ": device " + std::to_string(device) +
                                               " does not exist (" +
                                               std::to_string(d.devices.size()) + " devices)");
  *out = d.devices[static_cast<size_t>(device)].get();
  return CUDA_SUCCESS;
}

// Allocates a guarded, 0xFF-filled region and registers it. The fill happens after the mutex
// is released: nobody else knows the region yet.
CUresult allocate(const char *api, size_t bytes, bool host, uintptr_t *out) {
  Allocation allocation;
  {
    Driver &d = state();
    std::lock_guard<std::mutex> lock(d.mutex);
    Context *ctx = nullptr;
    if (CUresult rc = enterContext(api, &ctx))
      return rc;
    if (bytes == 0)
      return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": 0 bytes requested");
    if (CUresult rc = checkUnsafeCall(api))
      return rc;
    Device &device = *ctx->device;
    const size_t rounded = (bytes + 255) / 256 * 256;
    if (!host && (rounded < bytes || rounded > device.totalBytes - device.usedBytes))
      return fail(CUDA_ERROR_OUT_OF_MEMORY,
                  std::string(api) + "(" + std::to_string(bytes) + "): device " +
                      std::to_string(device.ordinal) + " has " +
                      std::to_string(device.totalBytes - device.usedBytes) + " of " +
                      std::to_string(device.totalBytes) +
                      " bytes free (KILN_CUDASIM_MEMORY_MB sets the size)");
    if (CUresult rc = mapAllocation(api, bytes, allocation))
      return rc;
    allocation.context = ctx;
    allocation.host = host;
    if (!host)
      device.usedBytes += allocation.accounted;
    d.allocations[allocation.base] = allocation;
  }
  // NaN in f32, f16 and bf16: a kernel reading memory nobody wrote shows it.
  std::memset(reinterpret_cast<void *>(allocation.base), 0xFF, allocation.accounted);
  *out = allocation.base;
  return CUDA_SUCCESS;
}

CUresult release(const char *api, uintptr_t base, bool host) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx, /*allowSticky=*/true))
    return rc;
  if (CUresult rc = checkUnsafeCall(api))
    return rc;
  auto it = d.allocations.find(base);
  if (it == d.allocations.end() || it->second.host != host) {
    const Allocation *inside = findAllocation(base);
    std::string why =
        inside ? (inside->host != host ? std::string(" was allocated by ") +
                                             (inside->host ? "cuMemHostAlloc" : "cuMemAlloc")
                                       : " points inside an allocation, not at its start")
               : " is not a live allocation";
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": pointer " + hexAddress(base) + why);
  }
  if (!host)
    it->second.context->device->usedBytes -= it->second.accounted;
  graveyard.allocations.push_back(it->second);
  d.allocations.erase(it);
  return ctx->sticky;
}

} // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (flags != 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0, got " + std::to_string(flags));
  if (!d.initialized && d.devices.empty() && d.initDetail.empty()) {
    d.initResult = configureDevices(d, d.initDetail);
    d.initialized = d.initResult == CUDA_SUCCESS;
  }
  if (d.initResult != CUDA_SUCCESS)
    return fail(d.initResult, "cuInit: " + d.initDetail);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *version) {
  if (!version)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion: null pointer");
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name) {
  const char *text = errorName(error);
  if (name)
    *name = text;
  return text && name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) {
  const char *description = errorDescription(error);
  if (text)
    *text = description;
  if (!description || !text)
    return CUDA_ERROR_INVALID_VALUE;
  const std::string &detail = lastDetail(error);
  if (!detail.empty()) {
    // Valid until this thread's next cuGetErrorString, as the caller copies it at once.
    thread_local std::string composed;
    composed = std::string(description) + ": " + detail;
    *text = composed.c_str();
  }
  return CUDA_SUCCESS;
}

// NVRTC looks for an already loaded libcuda.so.1 and, when it finds one, asks it for private
// tables by UUID (and crashes when the entry point is missing). The simulator has none: every
// table is unknown, as an unknown UUID is to the NVIDIA driver, and NVRTC carries on without.
CUresult CUDAAPI cuGetExportTable(const void **table, const CUuuid *) {
  if (table)
    *table = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (CUresult rc = checkInitialized("cuDeviceGetCount"))
    return rc;
  if (!count)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount: null pointer");
  *count = static_cast<int>(d.devices.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Device *found = nullptr;
  if (CUresult rc = checkDevice("cuDeviceGet", ordinal, &found))
    return rc;
  if (!device)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGet: null pointer");
  *device = found->ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int length, CUdevice device) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Device *found = nullptr;
  if (CUresult rc = checkDevice("cuDeviceGetName", device, &found))
    return rc;
  if (!name || length <= 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName: null name or length <= 0");
  const size_t n = std::min(std::strlen(kDeviceName), static_cast<size_t>(length) - 1);
  std::memcpy(name, kDeviceName, n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Device *found = nullptr;
  if (CUresult rc = checkDevice("cuDeviceGetAttribute", device, &found))
    return rc;
  if (!value || attribute <= 0 || attribute >= CU_DEVICE_ATTRIBUTE_MAX)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: null pointer or attribute " +
                                              std::to_string(static_cast<int>(attribute)) +
                                              " out of range");
  *value = attributeValue(attribute, *found);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Device *found = nullptr;
  if (CUresult rc = checkDevice("cuDevicePrimaryCtxRetain", device, &found))
    return rc;
  if (!context)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain: null pointer");
  ++found->context.retained;
  *context = reinterpret_cast<CUcontext>(&found->context);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  Graveyard graveyard; // destroyed after the mutex is released: it may call release callbacks
  std::lock_guard<std::mutex> lock(state().mutex);
  Device *found = nullptr;
  if (CUresult rc = checkDevice("cuDevicePrimaryCtxRelease", device, &found))
    return rc;
  if (found->context.retained == 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: device " +
                                                std::to_string(device) +
                                                "'s primary context is not retained");
  if (--found->context.retained == 0)
    destroyContextResources(found->context, graveyard);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (CUresult rc = checkInitialized("cuCtxSetCurrent"))
    return rc;
  auto *ctx = reinterpret_cast<Context *>(context);
  const bool known = std::any_of(d.devices.begin(), d.devices.end(),
                                 [&](const auto &device) { return &device->context == ctx; });
  if (ctx && !known)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                "cuCtxSetCurrent: the handle is not a context of this driver");
  setCurrentContext(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuMemGetInfo", &ctx))
    return rc;
  if (!freeBytes || !totalBytes)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo: null pointer");
  *totalBytes = ctx->device->totalBytes;
  *freeBytes = ctx->device->totalBytes - ctx->device->usedBytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *pointer, size_t bytes) {
  if (!pointer)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: null pointer");
  uintptr_t base = 0;
  CUresult rc = allocate("cuMemAlloc", bytes, /*host=*/false, &base);
  if (rc == CUDA_SUCCESS)
    *pointer = static_cast<CUdeviceptr>(base);
  return rc;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr pointer) {
  return release("cuMemFree", static_cast<uintptr_t>(pointer), /*host=*/false);
}

CUresult CUDAAPI cuMemHostAlloc(void **pointer, size_t bytes, unsigned int flags) {
  const unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (!pointer || (flags & ~known))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemHostAlloc: null pointer or unknown flags " + std::to_string(flags));
  uintptr_t base = 0;
  CUresult rc = allocate("cuMemHostAlloc", bytes, /*host=*/true, &base);
  if (rc == CUDA_SUCCESS)
    *pointer = reinterpret_cast<void *>(base);
  return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *pointer) {
  return release("cuMemFreeHost", reinterpret_cast<uintptr_t>(pointer), /*host=*/true);
}

// Unified addressing: the device sees host allocations at their host address.
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *devicePointer, void *pointer,
                                           unsigned int flags) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuMemHostGetDevicePointer", &ctx))
    return rc;
  const Allocation *a = findAllocation(reinterpret_cast<uintptr_t>(pointer));
  if (!devicePointer || flags != 0 || !a || !a->host)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemHostGetDevicePointer: null pointer, flags != 0, or the pointer is not "
                "inside a cuMemHostAlloc allocation");
  *devicePointer = reinterpret_cast<CUdeviceptr>(pointer);
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) int kilnCudasimCurrentDevice(char *why, size_t whyBytes) {
  std::lock_guard<std::mutex> lock(state().mutex);
  const Context *ctx = currentContext();
  if (!ctx || ctx->retained == 0)
    return noDevice("no CUDA context is current on this thread", why, whyBytes);
  return ctx->device->ordinal;
}

__attribute__((visibility("default"))) int kilnCudasimStreamDevice(CUstream handle, int *capturing,
                                                                   char *why, size_t whyBytes) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Driver &d = state();
  *capturing = 0;
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    const Context *ctx = currentContext();
    if (!ctx || ctx->retained == 0)
      return noDevice("the legacy stream without a current CUDA context", why, whyBytes);
    return ctx->device->ordinal;
  }
  auto it = d.streams.find(reinterpret_cast<Stream *>(handle));
  if (it == d.streams.end())
    return noDevice(hexAddress(reinterpret_cast<uintptr_t>(handle)) + " is not a live stream", why,
                    whyBytes);
  *capturing = it->second->capture ? 1 : 0;
  return it->second->context->device->ordinal;
}

__attribute__((visibility("default"))) int kilnCudasimRangeDevice(const void *p, size_t bytes,
                                                                  char *why, size_t whyBytes) {
  std::lock_guard<std::mutex> lock(state().mutex);
  const auto start = reinterpret_cast<uintptr_t>(p);
  if (std::string bad = describeBadRange(start, bytes); !bad.empty())
    return noDevice(bad, why, whyBytes);
  const Allocation *a = findAllocation(start);
  if (a->host)
    return noDevice("[" + hexAddress(start) + ", +" + std::to_string(bytes) +
                        ") is host memory (cuMemHostAlloc), not device memory",
                    why, whyBytes);
  return a->context->device->ordinal;
}

} // extern "C"
