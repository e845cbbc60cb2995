#include "tools/cudasim/sim_driver_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::cudasim::driver {
namespace {

// Names are the cuda.h enumerators; descriptions are short, in the style of cuGetErrorString.
#define KILN_CUDASIM_ERRORS(X)                                                                     \
  X(CUDA_SUCCESS, "no error")                                                                      \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                  \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                     \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                            \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                              \
  X(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled")                                             \
  X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized")                               \
  X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started")                               \
  X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped")                               \
  X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                                      \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires a newer driver")                         \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) busy or unavailable")                   \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                    \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                           \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed")                                         \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                                    \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                          \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                                 \
  X(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed")                                      \
  X(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed")                                  \
  X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped")                                                 \
  X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                                          \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")      \
  X(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired")                                      \
  X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                                  \
  X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array")                                \
  X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer")                            \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered")                           \
  X(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture")                   \
  X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use")                   \
  X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices")  \
  X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                                        \
  X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context")                      \
  X(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected")                        \
  X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found")                       \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported "       \
                                        "toolchain")                                               \
  X(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled")                       \
  X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the execution affinity is not supported")               \
  X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "device-side synchronization is not supported")           \
  X(CUDA_ERROR_CONTAINED, "the operation was contained")                                           \
  X(CUDA_ERROR_INVALID_SOURCE, "device kernel source is invalid")                                  \
  X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                                   \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found")                   \
  X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed")                   \
  X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")           \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                          \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")            \
  X(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy")                 \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                                \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                                      \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")                        \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")                 \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")                          \
  X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode")           \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")                      \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")                        \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process")        \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                                       \
  X(CUDA_ERROR_ASSERT, "device-side assert triggered")                                             \
  X(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted")                                 \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "host memory is already registered")                \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "host memory is not registered")                        \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                                       \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")                      \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                           \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space")    \
  X(CUDA_ERROR_INVALID_PC, "invalid program counter")                                              \
  X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                        \
  X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch")              \
  X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed")                           \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                           \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                           \
  X(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized")                                     \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver "      \
                                       "combination")                                              \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non "       \
                                               "supported HW")                                     \
  X(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon")    \
  X(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS "   \
                                "client failed")                                                   \
  X(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests")  \
  X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client "    \
                                        "have been exhausted")                                     \
  X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device "   \
                                            "connections have been exhausted")                     \
  X(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server")          \
  X(CUDA_ERROR_CDP_NOT_SUPPORTED, "module is using CUDA Dynamic Parallelism, which this device "   \
                                  "does not support")                                              \
  X(CUDA_ERROR_CDP_VERSION_MISMATCH, "CUDA Dynamic Parallelism version mismatch")                  \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")     \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during "      \
                                           "capture")                                              \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture "      \
                                     "sequences")                                                  \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began")   \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")                      \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another "       \
                                         "stream")                                                 \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a "      \
                                        "capturing blocking stream")                               \
  X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a "           \
                               "capturing stream")                                                 \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture "         \
                                            "sequence from another thread")                        \
  X(CUDA_ERROR_TIMEOUT, "wait operation timed out")                                                \
  X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it "         \
                                          "included changes which violated constraints specific "  \
                                          "to instantiated graph update")                          \
  X(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occurred in an external entity outside of "    \
                                "CUDA")                                                            \
  X(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster "          \
                                     "misconfiguration")                                           \
  X(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded")                           \
  X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type")                                     \
  X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration")                   \
  X(CUDA_ERROR_KEY_ROTATION, "an error occurred during key rotation")                              \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

struct ErrorInfo {
  CUresult code;
  const char *name;
  const char *description;
};

const ErrorInfo *findError(CUresult code) {
#define KILN_CUDASIM_ERROR_ENTRY(code, text) {code, #code, text},
  static const ErrorInfo kErrors[] = {KILN_CUDASIM_ERRORS(KILN_CUDASIM_ERROR_ENTRY)};
#undef KILN_CUDASIM_ERROR_ENTRY
  for (const ErrorInfo &info : kErrors)
    if (info.code == code)
      return &info;
  return nullptr;
}

struct ThreadError {
  CUresult code = CUDA_SUCCESS;
  std::string detail;
};
thread_local ThreadError lastError;
thread_local Context *current = nullptr;

const char *modeName(CUstreamCaptureMode mode) {
  switch (mode) {
  case CU_STREAM_CAPTURE_MODE_GLOBAL:
    return "global";
  case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
    return "thread-local";
  default:
    return "relaxed";
  }
}

// "90" or "90,80": one value per device, the last repeated for the rest (values past the
// device count are unused). Errors name the variable, its value and the accepted range.
bool parseList(const char *name, const char *fallback, int lo, int hi, size_t count,
               std::vector<int> &values, std::string &detail) {
  const char *env = std::getenv(name);
  const std::string text = env && *env ? env : fallback;
  values.clear();
  const char *p = text.data(), *end = text.data() + text.size();
  while (p < end) {
    int value = 0;
    auto [next, error] = std::from_chars(p, end, value);
    if (error != std::errc() || value < lo || value > hi || (next < end && *next != ',')) {
      detail = std::string(name) + "='" + text + "': expected integers in " + std::to_string(lo) +
               ".." + std::to_string(hi) + ", comma-separated (one per device)";
      return false;
    }
    values.push_back(value);
    p = next + (next < end ? 1 : 0);
  }
  if (values.empty()) {
    detail = std::string(name) + "='" + text + "': expected at least one value";
    return false;
  }
  while (values.size() < count)
    values.push_back(values.back());
  values.resize(count); // values past the device count are unused
  return true;
}

} // namespace

Graveyard::~Graveyard() {
  for (const Allocation &allocation : allocations)
    unmapAllocation(allocation);
}

Driver &state() {
  static Driver *instance = new Driver;
  return *instance;
}

CUresult fail(CUresult code, const std::string &detail) {
  lastError.code = code;
  lastError.detail = detail;
  const char *name = errorName(code);
  std::fprintf(stderr, "cudasim: %s: %s\n", name ? name : "CUresult", detail.c_str());
  return code;
}

const char *errorName(CUresult code) {
  const ErrorInfo *info = findError(code);
  return info ? info->name : nullptr;
}

const char *errorDescription(CUresult code) {
  const ErrorInfo *info = findError(code);
  return info ? info->description : nullptr;
}

const std::string &lastDetail(CUresult code) {
  static const std::string kEmpty;
  return lastError.code == code ? lastError.detail : kEmpty;
}

Context *currentContext() {
  return current;
}

void setCurrentContext(Context *context) {
  current = context;
}

CUresult checkInitialized(const char *api) {
  Driver &d = state();
  if (d.initialized)
    return CUDA_SUCCESS;
  return fail(CUDA_ERROR_NOT_INITIALIZED,
              std::string(api) + ": cuInit has not succeeded" +
                  (d.initDetail.empty() ? std::string() : " (" + d.initDetail + ")"));
}

CUresult enterContext(const char *api, Context **context, bool allowSticky) {
  if (CUresult rc = checkInitialized(api))
    return rc;
  Context *ctx = current;
  if (!ctx)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                std::string(api) + ": no current context on this thread (cuCtxSetCurrent)");
  if (ctx->retained == 0)
    return fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                std::string(api) + ": the current context (device " +
                    std::to_string(ctx->device->ordinal) +
                    "'s primary context) was released by its last owner");
  *context = ctx;
  if (ctx->sticky != CUDA_SUCCESS && !allowSticky) {
    // Reported once when it happened; later calls only return it, with the same detail.
    lastError.code = ctx->sticky;
    lastError.detail = ctx->stickyDetail;
    return ctx->sticky;
  }
  return CUDA_SUCCESS;
}

CUresult raiseSticky(Context *context, CUresult code, const std::string &detail) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (context->sticky == CUDA_SUCCESS) {
    context->sticky = code;
    context->stickyDetail = detail + " (sticky: device " +
                            std::to_string(context->device->ordinal) +
                            "'s context fails every later call until its last release)";
  }
  return fail(code, context->stickyDetail);
}

std::string hexAddress(uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, address);
  return text;
}

std::string streamName(const Stream *stream) {
  return stream ? "stream " + hexAddress(reinterpret_cast<uintptr_t>(stream)) : "the legacy stream";
}

CUresult resolveStream(const char *api, CUstream handle, Context *context, Stream **stream) {
  *stream = nullptr;
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD)
    return CUDA_SUCCESS;
  Driver &d = state();
  auto it = d.streams.find(reinterpret_cast<Stream *>(handle));
  if (it == d.streams.end())
    return fail(CUDA_ERROR_INVALID_HANDLE, std::string(api) + ": " +
                                               hexAddress(reinterpret_cast<uintptr_t>(handle)) +
                                               " is not a live stream");
  if (it->second->context != context)
    return fail(CUDA_ERROR_INVALID_HANDLE,
                std::string(api) + ": " + streamName(it->first) + " belongs to device " +
                    std::to_string(it->second->context->device->ordinal) +
                    "'s context, but the current context is device " +
                    std::to_string(context->device->ordinal) + "'s");
  *stream = it->first;
  return CUDA_SUCCESS;
}

void invalidateCapture(Capture &capture, const std::string &why) {
  if (capture.invalidatedBy.empty())
    capture.invalidatedBy = why;
}

CUresult checkUnsafeCall(const char *api) {
  Driver &d = state();
  const std::thread::id self = std::this_thread::get_id();
  std::string blocking;
  for (Capture *capture : d.captures) {
    // This thread's mode is the default (global): its own non-relaxed captures and every
    // other thread's global-mode capture forbid potentially unsafe calls.
    const bool own = capture->thread == self;
    if (capture->mode == CU_STREAM_CAPTURE_MODE_RELAXED ||
        (!own && capture->mode != CU_STREAM_CAPTURE_MODE_GLOBAL))
      continue;
    const std::string what = std::string(api) + " while " + streamName(capture->stream) +
                             " is being captured (" + modeName(capture->mode) + " mode" +
                             (own ? "" : ", by another thread") + ")";
    invalidateCapture(*capture, what);
    blocking = what;
  }
  if (blocking.empty())
    return CUDA_SUCCESS;
  return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              blocking + ": potentially unsafe calls (allocation, free, synchronous copies) are "
                         "not permitted; the capture is invalidated");
}

CUresult checkLegacyStreamUse(const char *api, Context *context) {
  Driver &d = state();
  std::string blocking;
  for (Capture *capture : d.captures) {
    if (capture->stream->context != context || (capture->stream->flags & CU_STREAM_NON_BLOCKING))
      continue;
    blocking = std::string(api) + " uses the legacy stream while blocking " +
               streamName(capture->stream) + " is being captured";
    invalidateCapture(*capture, blocking);
  }
  if (blocking.empty())
    return CUDA_SUCCESS;
  return fail(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
              blocking + ": the legacy stream would wait for the capture; the capture is "
                         "invalidated (create the stream with CU_STREAM_NON_BLOCKING)");
}

Allocation *findAllocation(uintptr_t address) {
  Driver &d = state();
  auto it = d.allocations.upper_bound(address);
  if (it == d.allocations.begin())
    return nullptr;
  --it;
  Allocation &a = it->second;
  return address < a.base + a.bytes ? &a : nullptr;
}

std::string describeBadRange(uintptr_t start, size_t bytes) {
  const std::string range =
      "[" + hexAddress(start) + ", " + hexAddress(start) + " + " + std::to_string(bytes) + ")";
  if (start + bytes < start)
    return range + " wraps around the address space";
  const Allocation *a = findAllocation(start);
  if (!a)
    return range + " starts outside every live allocation";
  if (start + bytes > a->base + a->bytes)
    return range + " runs " + std::to_string(start + bytes - (a->base + a->bytes)) +
           " bytes past the end of the allocation [" + hexAddress(a->base) + ", +" +
           std::to_string(a->bytes) + ")";
  return "";
}

CUresult checkDeviceRange(const char *api, const char *role, uintptr_t start, size_t bytes) {
  std::string bad = describeBadRange(start, bytes);
  if (bad.empty())
    return CUDA_SUCCESS;
  return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": " + role + " range " + bad);
}

CUresult mapAllocation(const char *api, size_t bytes, Allocation &allocation) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + 255) / 256 * 256;
  const size_t dataBytes = (rounded + page - 1) / page * page;
  const size_t total = dataBytes + 2 * page;
  if (rounded < bytes || total < dataBytes)
    return fail(CUDA_ERROR_OUT_OF_MEMORY, std::string(api) + "(" + std::to_string(bytes) +
                                              "): size overflows the address space");
  void *mapping =
      mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED)
    return fail(CUDA_ERROR_OUT_OF_MEMORY, std::string(api) + "(" + std::to_string(bytes) +
                                              "): mmap failed: " + std::strerror(errno));
  auto *data = static_cast<uint8_t *>(mapping) + page;
  if (mprotect(data, dataBytes, PROT_READ | PROT_WRITE) != 0) {
    munmap(mapping, total);
    return fail(CUDA_ERROR_OUT_OF_MEMORY, std::string(api) + "(" + std::to_string(bytes) +
                                              "): mprotect failed: " + std::strerror(errno));
  }
  allocation.mapping = mapping;
  allocation.mappingBytes = total;
  allocation.base = reinterpret_cast<uintptr_t>(data + dataBytes - rounded);
  allocation.bytes = bytes;
  allocation.accounted = rounded;
  return CUDA_SUCCESS;
}

void unmapAllocation(const Allocation &allocation) {
  if (allocation.mapping)
    munmap(allocation.mapping, allocation.mappingBytes);
}

void destroyContextResources(Context &context, Graveyard &graveyard) {
  Driver &d = state();
  for (auto it = d.allocations.begin(); it != d.allocations.end();) {
    if (it->second.context != &context) {
      ++it;
      continue;
    }
    if (!it->second.host)
      context.device->usedBytes -= it->second.accounted;
    graveyard.allocations.push_back(it->second);
    it = d.allocations.erase(it);
  }
  for (auto it = d.streams.begin(); it != d.streams.end();) {
    if (it->second->context != &context) {
      ++it;
      continue;
    }
    if (it->second->capture) {
      d.captures.erase(it->second->capture.get());
      graveyard.captures.push_back(std::move(it->second->capture));
    }
    graveyard.streams.push_back(std::move(it->second));
    it = d.streams.erase(it);
  }
  for (auto it = d.events.begin(); it != d.events.end();) {
    if (it->second->context != &context) {
      ++it;
      continue;
    }
    graveyard.events.push_back(std::move(it->second));
    it = d.events.erase(it);
  }
  for (auto it = d.modules.begin(); it != d.modules.end();) {
    if (it->second->context != &context) {
      ++it;
      continue;
    }
    for (auto &[name, function] : it->second->functions) {
      auto f = d.functions.find(function);
      graveyard.functions.push_back(std::move(f->second));
      d.functions.erase(f);
    }
    graveyard.modules.push_back(std::move(it->second));
    it = d.modules.erase(it);
  }
  context.sticky = CUDA_SUCCESS;
  context.stickyDetail.clear();
}

CUresult configureDevices(Driver &d, std::string &detail) {
  std::vector<int> count;
  if (!parseList("KILN_CUDASIM_DEVICES", "1", 0, 8, 1, count, detail))
    return CUDA_ERROR_INVALID_VALUE;
  const size_t devices = static_cast<size_t>(count[0]);
  if (devices == 0) {
    detail = "KILN_CUDASIM_DEVICES=0: the simulator offers no device";
    return CUDA_ERROR_NO_DEVICE;
  }
  std::vector<int> sms, megabytes;
  if (!parseList("KILN_CUDASIM_SM", "90", 30, 129, devices, sms, detail) ||
      !parseList("KILN_CUDASIM_MEMORY_MB", "1024", 1, 1 << 20, devices, megabytes, detail))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < devices; ++i) {
    auto device = std::make_unique<Device>();
    device->ordinal = static_cast<int>(i);
    device->major = sms[i] / 10;
    device->minor = sms[i] % 10;
    device->totalBytes = static_cast<size_t>(megabytes[i]) << 20;
    device->context.device = device.get();
    d.devices.push_back(std::move(device));
  }
  return CUDA_SUCCESS;
}

} // namespace kiln::cudasim::driver
