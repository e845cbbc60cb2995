// The simulated driver's streams, copies, launches, events, stream capture and graphs. Streams
// are synchronous: work runs when it is enqueued, on the calling thread, unless the stream is
// being captured, in which case it is recorded (kernel parameters copied now, copy sources read
// when the graph runs) and cuGraphLaunch replays it in order. So an event's record is the time
// the work before it finished.
#include "tools/cudasim/sim_driver_state.h"
#include "tools/cudasim/sim_hooks.h"

#include <chrono>
#include <cstring>

// cuda.h maps cuEventElapsedTime to cuEventElapsedTime_v2 (CUDA 12.8 on); kiln resolves the v1
// symbol, which older drivers export too, so that is the name the simulator exports.
#undef cuEventElapsedTime

using namespace kiln;
using namespace kiln::cudasim;
using namespace kiln::cudasim::driver;

namespace kiln::cudasim::driver {
namespace {

uintptr_t address(const void *p) {
  return reinterpret_cast<uintptr_t>(p);
}

// The device sides of a copy, checked against the live allocations; empty when they are good.
std::string badCopyRanges(const CopyNode &copy) {
  if (copy.width == 0 || copy.height == 0)
    return "";
  auto span = [&](size_t pitch) { return (copy.height - 1) * pitch + copy.width; };
  if (copy.dstDevice)
    if (std::string bad = describeBadRange(address(copy.dst), span(copy.dstPitch)); !bad.empty())
      return std::string(copy.api) + ": destination range " + bad;
  if (copy.srcDevice)
    if (std::string bad = describeBadRange(address(copy.src), span(copy.srcPitch)); !bad.empty())
      return std::string(copy.api) + ": source range " + bad;
  return "";
}

CUresult runCopy(const CopyNode &copy, Context *context, bool replay) {
  if (replay) {
    // The allocation may have been freed since capture: a GPU would fault on it.
    std::unique_lock<std::mutex> lock(state().mutex);
    std::string bad = badCopyRanges(copy);
    lock.unlock();
    if (!bad.empty())
      return raiseSticky(context, CUDA_ERROR_ILLEGAL_ADDRESS, "graph replay of " + bad);
  }
  for (size_t row = 0; row < copy.height; ++row)
    std::memmove(copy.dst + row * copy.dstPitch, copy.src + row * copy.srcPitch, copy.width);
  return CUDA_SUCCESS;
}

CUresult runMemset(const MemsetNode &memset, Context *context, bool replay) {
  if (memset.bytes == 0)
    return CUDA_SUCCESS;
  if (replay) {
    std::unique_lock<std::mutex> lock(state().mutex);
    std::string bad = describeBadRange(address(memset.dst), memset.bytes);
    lock.unlock();
    if (!bad.empty())
      return raiseSticky(context, CUDA_ERROR_ILLEGAL_ADDRESS,
                         "graph replay of cuMemsetD8Async: range " + bad);
  }
  std::memset(memset.dst, memset.value, memset.bytes);
  return CUDA_SUCCESS;
}

} // namespace

CUresult runNode(const Node &node, Context *context, bool replay) {
  if (const auto *kernel = std::get_if<KernelNode>(&node)) {
    Status ran = runGrid(kernel->kernel->symbol, kernel->kernel->entry, kernel->params.data(),
                         kernel->grid, kernel->block, kernel->kernel->maxThreads);
    if (!ran.isOk())
      return raiseSticky(context, CUDA_ERROR_LAUNCH_FAILED,
                         std::string(replay ? "graph replay: " : "cuLaunchKernel: ") +
                             ran.message());
    return CUDA_SUCCESS;
  }
  if (const auto *copy = std::get_if<CopyNode>(&node))
    return runCopy(*copy, context, replay);
  if (const auto *memset = std::get_if<MemsetNode>(&node))
    return runMemset(*memset, context, replay);
  const HostWork &host = *std::get<std::shared_ptr<HostWork>>(node);
  host.work(host.data);
  return CUDA_SUCCESS;
}

CUresult submit(const char *api, CUstream handle, Node node,
                const std::function<CUresult(Context *)> &validate) {
  Driver &d = state();
  std::unique_lock<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, handle, ctx, &stream))
    return rc;
  if (validate)
    if (CUresult rc = validate(ctx))
      return rc;
  if (!stream) {
    if (CUresult rc = checkLegacyStreamUse(api, ctx))
      return rc;
  } else if (stream->capture) {
    Capture &capture = *stream->capture;
    if (!capture.invalidatedBy.empty())
      return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                  std::string(api) + ": the capture of " + streamName(stream) +
                      " was invalidated by " + capture.invalidatedBy);
    capture.nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
  }
  lock.unlock();
  return runNode(node, ctx, /*replay=*/false);
}

} // namespace kiln::cudasim::driver

namespace {

// Synchronous copies run on the legacy stream and wait for it: potentially unsafe during capture.
CUresult copySync(const char *api, CopyNode copy) {
  {
    Driver &d = state();
    std::lock_guard<std::mutex> lock(d.mutex);
    Context *ctx = nullptr;
    if (CUresult rc = enterContext(api, &ctx))
      return rc;
    if (CUresult rc = checkUnsafeCall(api))
      return rc;
  }
  return submit(api, nullptr, copy, [copy](Context *) {
    std::string bad = badCopyRanges(copy);
    return bad.empty() ? CUDA_SUCCESS : fail(CUDA_ERROR_INVALID_VALUE, bad);
  });
}

CUresult copyAsync(const char *api, CopyNode copy, CUstream stream) {
  if (copy.width == 0 || copy.height == 0)
    return submit(api, stream, MemsetNode{}); // checks the context and stream, copies nothing
  return submit(api, stream, copy, [copy](Context *) {
    std::string bad = badCopyRanges(copy);
    return bad.empty() ? CUDA_SUCCESS : fail(CUDA_ERROR_INVALID_VALUE, bad);
  });
}

CopyNode linearCopy(const char *api, void *dst, bool dstDevice, const void *src, bool srcDevice,
                    size_t bytes) {
  CopyNode copy;
  copy.api = api;
  copy.dst = static_cast<uint8_t *>(dst);
  copy.src = static_cast<const uint8_t *>(src);
  copy.width = bytes;
  copy.dstPitch = copy.srcPitch = bytes;
  copy.dstDevice = dstDevice;
  copy.srcDevice = srcDevice;
  return copy;
}

// One side of a CUDA_MEMCPY2D: its start address and whether it is device memory.
CUresult memcpy2DSide(const char *role, CUmemorytype type, const void *host, CUdeviceptr device,
                      size_t x, size_t y, size_t pitch, uintptr_t *start, bool *isDevice) {
  const char *api = "cuMemcpy2DAsync";
  switch (type) {
  case CU_MEMORYTYPE_HOST:
    *start = address(host);
    *isDevice = false;
    break;
  case CU_MEMORYTYPE_DEVICE:
    *start = static_cast<uintptr_t>(device);
    *isDevice = true;
    break;
  case CU_MEMORYTYPE_UNIFIED: {
    *start = static_cast<uintptr_t>(device);
    std::lock_guard<std::mutex> lock(state().mutex);
    *isDevice = findAllocation(*start) != nullptr;
    break;
  }
  default:
    return fail(CUDA_ERROR_NOT_SUPPORTED, std::string(api) + ": " + role + " memory type " +
                                              std::to_string(static_cast<int>(type)) +
                                              " (CUDA arrays) is not simulated");
  }
  *start += y * pitch + x;
  return CUDA_SUCCESS;
}

// Launch configuration errors a GPU reports at the call, without poisoning the context.
CUresult checkLaunchDims(const HostKernel &kernel, Dim3 grid, Dim3 block) {
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  const std::string what = "cuLaunchKernel(" + kernel.symbol + ", grid " + std::to_string(grid.x) +
                           "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
                           ", block " + std::to_string(block.x) + "x" + std::to_string(block.y) +
                           "x" + std::to_string(block.z) + "): ";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    return fail(CUDA_ERROR_INVALID_VALUE, what + "a dimension is 0");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return fail(CUDA_ERROR_INVALID_VALUE, what + "grid over (2^31 - 1, 65535, 65535)");
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
    return fail(CUDA_ERROR_INVALID_VALUE, what + "block over 1024 threads or (1024, 1024, 64)");
  if (kernel.maxThreads > 0 && threads > kernel.maxThreads)
    return fail(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
                what + std::to_string(threads) +
                    " threads exceed the kernel's __launch_bounds__ (" +
                    std::to_string(kernel.maxThreads) + ")");
  return CUDA_SUCCESS;
}

// Checks a launch and fills `node` (the parameters copied now, as the driver does), with the
// driver mutex held.
CUresult prepareLaunch(Context *ctx, CUfunction function, unsigned sharedBytes, void **kernelParams,
                       void **extra, KernelNode &node) {
  const std::string api = "cuLaunchKernel";
  Driver &d = state();
  auto it = d.functions.find(reinterpret_cast<Function *>(function));
  if (it == d.functions.end())
    return fail(CUDA_ERROR_INVALID_HANDLE, api + ": " + hexAddress(address(function)) +
                                               " is not a function of a loaded module");
  const HostKernel &kernel = *it->second->kernel;
  if (it->second->module->context != ctx)
    return fail(CUDA_ERROR_INVALID_HANDLE,
                api + ": " + kernel.symbol + " was loaded in another device's context");
  if (kernelParams && extra)
    return fail(CUDA_ERROR_INVALID_VALUE, api + ": both kernelParams and extra are given");
  if (extra)
    return fail(CUDA_ERROR_NOT_SUPPORTED,
                api + ": `extra` (packed parameter buffers) is not simulated; pass kernelParams");
  if (!kernelParams || !kernelParams[0])
    return fail(CUDA_ERROR_INVALID_VALUE,
                api + "(" + kernel.symbol +
                    "): kernelParams[0] must point at the kernel's parameter struct");
  if (sharedBytes != 0)
    return fail(CUDA_ERROR_NOT_SUPPORTED,
                api + "(" + kernel.symbol + "): " + std::to_string(sharedBytes) +
                    " bytes of dynamic shared memory; the simulator runs kernels with static "
                    "shared memory only");
  if (CUresult rc = checkLaunchDims(kernel, node.grid, node.block))
    return rc;
  node.kernel = &kernel;
  const auto *params = static_cast<const uint8_t *>(kernelParams[0]);
  node.params.assign(params, params + kernel.paramsBytes);
  return CUDA_SUCCESS;
}

// Every stream is idle once its enqueue returned, but waiting on a capturing stream is illegal
// in every capture mode, and waiting on the legacy stream while a blocking stream captures
// would wait for the capture.
CUresult waitStream(const char *api, CUstream handle) {
  std::lock_guard<std::mutex> lock(state().mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, handle, ctx, &stream))
    return rc;
  if (!stream)
    return checkLegacyStreamUse(api, ctx);
  if (stream->capture) {
    const std::string what =
        std::string(api) + " of " + streamName(stream) + " while it is being captured";
    invalidateCapture(*stream->capture, what);
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, what + "; the capture is invalidated");
  }
  return CUDA_SUCCESS;
}

// With the mutex held; `role` names the argument in the message ("event", "start event").
CUresult findEvent(const char *api, const char *role, CUevent handle, Event **event) {
  Driver &d = state();
  auto it = d.events.find(reinterpret_cast<Event *>(handle));
  if (it == d.events.end())
    return fail(CUDA_ERROR_INVALID_HANDLE, std::string(api) + ": " + role + " " +
                                               hexAddress(address(handle)) +
                                               " is not a live event");
  *event = it->second.get();
  return CUDA_SUCCESS;
}

std::string contextName(const Context *context) {
  return "device " + std::to_string(context->device->ordinal) + "'s context";
}

// What cuEventElapsedTime needs of each event: a timestamp.
CUresult checkTimed(const char *role, const Event &event, CUevent handle) {
  const std::string what =
      std::string("cuEventElapsedTime: ") + role + " " + hexAddress(address(handle));
  if (event.flags & CU_EVENT_DISABLE_TIMING)
    return fail(CUDA_ERROR_INVALID_HANDLE, what + " was created with CU_EVENT_DISABLE_TIMING");
  if (!event.recorded)
    return fail(CUDA_ERROR_INVALID_HANDLE, what + " has not been recorded (cuEventRecord)");
  return CUDA_SUCCESS;
}

} // namespace

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int flags) {
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuStreamCreate", &ctx))
    return rc;
  if (!stream || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuStreamCreate: null pointer or unknown flags " + std::to_string(flags));
  auto created = std::make_unique<Stream>();
  created->context = ctx;
  created->flags = flags;
  *stream = reinterpret_cast<CUstream>(created.get());
  d.streams[created.get()] = std::move(created);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream handle) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuStreamDestroy", &ctx, /*allowSticky=*/true))
    return rc;
  auto it = d.streams.find(reinterpret_cast<Stream *>(handle));
  if (it == d.streams.end())
    return fail(CUDA_ERROR_INVALID_HANDLE,
                "cuStreamDestroy: " + hexAddress(address(handle)) + " is not a live stream");
  if (it->second->capture) {
    d.captures.erase(it->second->capture.get());
    graveyard.captures.push_back(std::move(it->second->capture));
  }
  graveyard.streams.push_back(std::move(it->second));
  d.streams.erase(it);
  return ctx->sticky;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  return waitStream("cuStreamSynchronize", stream);
}

CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  return waitStream("cuStreamQuery", stream);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return CUDA_SUCCESS;
  return copySync("cuMemcpyHtoD", linearCopy("cuMemcpyHtoD", reinterpret_cast<void *>(dst), true,
                                             src, false, bytes));
}

CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  if (bytes == 0)
    return CUDA_SUCCESS;
  return copySync("cuMemcpyDtoH", linearCopy("cuMemcpyDtoH", dst, false,
                                             reinterpret_cast<const void *>(src), true, bytes));
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                   CUstream stream) {
  return copyAsync(
      "cuMemcpyHtoDAsync",
      linearCopy("cuMemcpyHtoDAsync", reinterpret_cast<void *>(dst), true, src, false, bytes),
      stream);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copyAsync(
      "cuMemcpyDtoHAsync",
      linearCopy("cuMemcpyDtoHAsync", dst, false, reinterpret_cast<const void *>(src), true, bytes),
      stream);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes,
                                 CUstream stream) {
  MemsetNode node{reinterpret_cast<uint8_t *>(dst), value, bytes};
  return submit("cuMemsetD8Async", stream, node, [node](Context *) {
    std::string bad = describeBadRange(address(node.dst), node.bytes);
    return bad.empty() || node.bytes == 0
               ? CUDA_SUCCESS
               : fail(CUDA_ERROR_INVALID_VALUE, "cuMemsetD8Async: range " + bad);
  });
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *copy, CUstream stream) {
  const char *api = "cuMemcpy2DAsync";
  if (!copy)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null descriptor");
  if (copy->Height > 1 &&
      (copy->srcPitch < copy->WidthInBytes || copy->dstPitch < copy->WidthInBytes))
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": WidthInBytes " + std::to_string(copy->WidthInBytes) +
                    " exceeds a pitch (src " + std::to_string(copy->srcPitch) + ", dst " +
                    std::to_string(copy->dstPitch) + ")");
  CopyNode node;
  node.api = api;
  uintptr_t dst = 0, src = 0;
  if (CUresult rc =
          memcpy2DSide("source", copy->srcMemoryType, copy->srcHost, copy->srcDevice,
                       copy->srcXInBytes, copy->srcY, copy->srcPitch, &src, &node.srcDevice))
    return rc;
  if (CUresult rc =
          memcpy2DSide("destination", copy->dstMemoryType, copy->dstHost, copy->dstDevice,
                       copy->dstXInBytes, copy->dstY, copy->dstPitch, &dst, &node.dstDevice))
    return rc;
  node.dst = reinterpret_cast<uint8_t *>(dst);
  node.src = reinterpret_cast<const uint8_t *>(src);
  node.dstPitch = copy->dstPitch;
  node.srcPitch = copy->srcPitch;
  node.width = copy->WidthInBytes;
  node.height = copy->Height;
  return copyAsync(api, node, stream);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int gridX, unsigned int gridY,
                                unsigned int gridZ, unsigned int blockX, unsigned int blockY,
                                unsigned int blockZ, unsigned int sharedBytes, CUstream stream,
                                void **kernelParams, void **extra) {
  KernelNode node;
  node.grid = {gridX, gridY, gridZ};
  node.block = {blockX, blockY, blockZ};
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    Context *ctx = nullptr;
    if (CUresult rc = enterContext("cuLaunchKernel", &ctx))
      return rc;
    if (CUresult rc = prepareLaunch(ctx, function, sharedBytes, kernelParams, extra, node))
      return rc;
  }
  return submit("cuLaunchKernel", stream, std::move(node));
}

// Of the launch attributes, programmatic stream serialization (kiln's GEMV, common.cuh
// waitForPriorGrids) is accepted: it allows a launch to overlap the one before it, and the
// simulator runs every launch after the one before it has finished, which satisfies it. Any other
// attribute is refused, so a new use of one shows up here first.
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction function,
                                  void **kernelParams, void **extra) {
  if (!config)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: config is null");
  if (config->numAttrs > 0 && !config->attrs)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernelEx: numAttrs > 0 with no attrs");
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      return fail(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernelEx: launch attribute " +
                                                std::to_string(config->attrs[i].id) +
                                                " is not simulated");
  return cuLaunchKernel(function, config->gridDimX, config->gridDimY, config->gridDimZ,
                        config->blockDimX, config->blockDimY, config->blockDimZ,
                        config->sharedMemBytes, config->hStream, kernelParams, extra);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream handle, CUstreamCaptureMode mode) {
  const char *api = "cuStreamBeginCapture";
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, handle, ctx, &stream))
    return rc;
  if (!stream)
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                std::string(api) + ": the legacy stream cannot be captured; create a stream");
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": unknown mode " + std::to_string(static_cast<int>(mode)));
  if (stream->capture)
    return fail(CUDA_ERROR_ILLEGAL_STATE,
                std::string(api) + ": " + streamName(stream) + " is already being captured");
  stream->capture = std::make_unique<Capture>();
  stream->capture->stream = stream;
  stream->capture->mode = mode;
  stream->capture->thread = std::this_thread::get_id();
  d.captures.insert(stream->capture.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream handle, CUgraph *graph) {
  const char *api = "cuStreamEndCapture";
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, handle, ctx, &stream))
    return rc;
  if (!graph)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null graph pointer");
  *graph = nullptr;
  if (!stream || !stream->capture)
    return fail(CUDA_ERROR_ILLEGAL_STATE,
                std::string(api) + ": " + streamName(stream) + " is not being captured");
  if (stream->capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      stream->capture->thread != std::this_thread::get_id())
    return fail(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                std::string(api) + ": " + streamName(stream) +
                    "'s capture began on another thread and is not in relaxed mode");
  std::unique_ptr<Capture> capture = std::move(stream->capture);
  d.captures.erase(capture.get());
  if (!capture->invalidatedBy.empty()) {
    const std::string why = capture->invalidatedBy;
    graveyard.captures.push_back(std::move(capture));
    return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, std::string(api) + ": the capture of " +
                                                           streamName(stream) +
                                                           " was invalidated by " + why);
  }
  auto made = std::make_unique<Graph>();
  made->nodes = std::move(capture->nodes);
  *graph = reinterpret_cast<CUgraph>(made.get());
  d.graphs[made.get()] = std::move(made);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
  const char *api = "cuGraphInstantiateWithFlags";
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  auto it = d.graphs.find(reinterpret_cast<Graph *>(graph));
  const unsigned long long known =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (!exec || it == d.graphs.end() || (flags & ~known))
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": null pointer, unknown graph or unknown flags");
  auto made = std::make_unique<GraphExec>();
  made->context = ctx;
  made->body = std::make_shared<ExecBody>();
  made->body->nodes = it->second->nodes; // host work is shared; its release waits for both
  *exec = reinterpret_cast<CUgraphExec>(made.get());
  d.execs[made.get()] = std::move(made);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream handle) {
  const char *api = "cuGraphLaunch";
  Driver &d = state();
  std::unique_lock<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  auto it = d.execs.find(reinterpret_cast<GraphExec *>(exec));
  if (it == d.execs.end())
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": " + hexAddress(address(exec)) + " is not a live graph exec");
  if (it->second->context != ctx)
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": the graph was instantiated in another device's context");
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, handle, ctx, &stream))
    return rc;
  std::shared_ptr<ExecBody> body = it->second->body;
  if (!stream) {
    if (CUresult rc = checkLegacyStreamUse(api, ctx))
      return rc;
  } else if (stream->capture) {
    // A graph launched into a capturing stream becomes part of the captured graph.
    if (!stream->capture->invalidatedBy.empty())
      return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                  std::string(api) + ": the capture of " + streamName(stream) +
                      " was invalidated by " + stream->capture->invalidatedBy);
    for (const Node &node : body->nodes)
      stream->capture->nodes.push_back(node);
    return CUDA_SUCCESS;
  }
  lock.unlock();
  std::lock_guard<std::mutex> running(body->run);
  for (const Node &node : body->nodes)
    if (CUresult rc = runNode(node, ctx, /*replay=*/true))
      return rc;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  if (CUresult rc = checkInitialized("cuGraphExecDestroy"))
    return rc;
  return buryLive(d.execs, exec, "cuGraphExecDestroy", "graph exec", graveyard.execs);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  if (CUresult rc = checkInitialized("cuGraphDestroy"))
    return rc;
  return buryLive(d.graphs, graph, "cuGraphDestroy", "graph", graveyard.graphs);
}

CUresult CUDAAPI cuEventCreate(CUevent *event, unsigned int flags) {
  const char *api = "cuEventCreate";
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!event)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null event pointer");
  if (flags & ~known)
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": unknown flags " + hexAddress(flags) +
                    " (known: CU_EVENT_BLOCKING_SYNC 0x1, CU_EVENT_DISABLE_TIMING 0x2, "
                    "CU_EVENT_INTERPROCESS 0x4)");
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(api) + ": CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING");
  auto created = std::make_unique<Event>();
  created->context = ctx;
  created->flags = flags;
  *event = reinterpret_cast<CUevent>(created.get());
  d.events[created.get()] = std::move(created);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent handle, CUstream streamHandle) {
  const char *api = "cuEventRecord";
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Event *event = nullptr;
  if (CUresult rc = findEvent(api, "event", handle, &event))
    return rc;
  Stream *stream = nullptr;
  if (CUresult rc = resolveStream(api, streamHandle, ctx, &stream))
    return rc;
  if (event->context != ctx)
    return fail(CUDA_ERROR_INVALID_HANDLE, std::string(api) + ": event " +
                                               hexAddress(address(handle)) + " belongs to " +
                                               contextName(event->context) + ", but " +
                                               streamName(stream) + " to " + contextName(ctx));
  if (!stream) {
    if (CUresult rc = checkLegacyStreamUse(api, ctx))
      return rc;
  } else if (stream->capture) {
    // A GPU would add an event-record node to the graph; kiln never records into a capture.
    const std::string what =
        std::string(api) + " into " + streamName(stream) + " while it is being captured";
    invalidateCapture(*stream->capture, what);
    return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                what + ": cudasim does not simulate event-record nodes; the capture is "
                       "invalidated");
  }
  event->recorded = true;
  event->recordedAt = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

// The work an event captured ran before its record returned; an event never recorded captures
// none. Either way there is nothing to wait for.
CUresult CUDAAPI cuEventSynchronize(CUevent handle) {
  const char *api = "cuEventSynchronize";
  std::lock_guard<std::mutex> lock(state().mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  Event *event = nullptr;
  return findEvent(api, "event", handle, &event);
}

CUresult CUDAAPI cuEventElapsedTime(float *milliseconds, CUevent startHandle, CUevent endHandle) {
  const char *api = "cuEventElapsedTime";
  std::lock_guard<std::mutex> lock(state().mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  if (!milliseconds)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null result pointer");
  Event *start = nullptr, *end = nullptr;
  if (CUresult rc = findEvent(api, "start event", startHandle, &start))
    return rc;
  if (CUresult rc = findEvent(api, "end event", endHandle, &end))
    return rc;
  if (CUresult rc = checkTimed("start event", *start, startHandle))
    return rc;
  if (CUresult rc = checkTimed("end event", *end, endHandle))
    return rc;
  // Each GPU has its own clock: events of two devices are not comparable.
  if (start->context != end->context)
    return fail(CUDA_ERROR_INVALID_HANDLE, std::string(api) + ": the start event belongs to " +
                                               contextName(start->context) + ", the end event to " +
                                               contextName(end->context));
  // Negative when the end was recorded first, as on a GPU.
  *milliseconds =
      std::chrono::duration<float, std::milli>(end->recordedAt - start->recordedAt).count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent handle) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuEventDestroy", &ctx, /*allowSticky=*/true))
    return rc;
  if (CUresult rc = buryLive(d.events, handle, "cuEventDestroy", "event", graveyard.events,
                             CUDA_ERROR_INVALID_HANDLE))
    return rc;
  return ctx->sticky;
}

__attribute__((visibility("default"))) CUresult
kilnCudasimEnqueueHostWork(CUstream stream, void (*work)(void *data), void *data,
                           void (*release)(void *data)) {
  // Owned from here on: `release` runs once nothing can run the work any more, including
  // when this call fails.
  auto host = std::make_shared<HostWork>();
  host->work = work;
  host->data = data;
  host->release = release;
  if (!work)
    return fail(CUDA_ERROR_INVALID_VALUE, "kilnCudasimEnqueueHostWork: null work function");
  return submit("kilnCudasimEnqueueHostWork", stream, std::move(host));
}

} // extern "C"
