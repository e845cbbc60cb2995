// The simulated CUDA driver's state (libcuda.so.1 from sim_driver*.cc): devices with their
// primary contexts and memory accounting, allocations (one guarded mmap region each), streams,
// stream captures, events, graphs and modules, all behind one mutex. The entry points lock it to
// look things up and record work, and release it while work runs (kernels, copies, host work),
// so a host-work callback or a kernel may call the driver again and ranks on other threads
// proceed.
#pragma once

#include "tools/cudasim/kernel_jit.h"

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#pragma GCC visibility push(hidden)

namespace kiln::cudasim::driver {

struct Device;

// A device's primary context: the only kind kiln uses. The handle stays the same across
// release/retain cycles, as the NVIDIA driver's does.
struct Context {
  Device *device = nullptr;
  int retained = 0;
  // A failed kernel (deadlock, trap) poisons the context like a GPU fault: every later call
  // that needs it returns this error until the last release destroys the context.
  CUresult sticky = CUDA_SUCCESS;
  std::string stickyDetail;
};

struct Device {
  int ordinal = 0;
  int major = 9;
  int minor = 0;
  size_t totalBytes = 0;
  size_t usedBytes = 0; // allocation sizes rounded up to 256 bytes
  Context context;
  int sm() const { return major * 10 + minor; }
};

// [base, base + bytes) ends within 255 bytes of a PROT_NONE page; a second one sits before the
// first data page.
struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  size_t accounted = 0;
  void *mapping = nullptr;
  size_t mappingBytes = 0;
  Context *context = nullptr;
  bool host = false; // cuMemHostAlloc: host memory whose device pointer is the same address
};

// A host function ordered on a stream (sim_hooks.h); `release` runs when the last owner (the
// enqueue that ran it, or the last graph holding it) lets go.
struct HostWork {
  void (*work)(void *) = nullptr;
  void *data = nullptr;
  void (*release)(void *) = nullptr;
  ~HostWork() {
    if (release)
      release(data);
  }
};

struct KernelNode {
  const HostKernel *kernel = nullptr;
  Dim3 grid, block;
  std::vector<uint8_t> params; // copied at the launch (or capture), as the driver does
};

// Every copy is a 2D copy (a 1D copy has one row). Device sides are checked against the live
// allocations when recorded, and again when a graph replays them.
struct CopyNode {
  const char *api = "";
  uint8_t *dst = nullptr;
  const uint8_t *src = nullptr;
  size_t dstPitch = 0;
  size_t srcPitch = 0;
  size_t width = 0;
  size_t height = 1;
  bool dstDevice = false;
  bool srcDevice = false;
};

struct MemsetNode {
  uint8_t *dst = nullptr;
  uint8_t value = 0;
  size_t bytes = 0;
};

using Node = std::variant<KernelNode, CopyNode, MemsetNode, std::shared_ptr<HostWork>>;

struct Stream;

struct Capture {
  Stream *stream = nullptr;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
  std::string invalidatedBy; // empty while the capture is valid
  std::vector<Node> nodes;
};

struct Stream {
  Context *context = nullptr;
  unsigned flags = 0;
  std::unique_ptr<Capture> capture;
};

// Streams are synchronous, so the work an event captures is done when cuEventRecord returns:
// an event is only the steady-clock time of its last record.
struct Event {
  Context *context = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point recordedAt;
};

struct Graph {
  std::vector<Node> nodes;
};

// An executable graph: its own copy of the nodes, shared with the launches running it so a
// concurrent destroy cannot free them mid-run; `run` orders launches of the same graph.
struct ExecBody {
  std::mutex run;
  std::vector<Node> nodes;
};
struct GraphExec {
  Context *context = nullptr;
  std::shared_ptr<ExecBody> body;
};

// What a module image is, as far as a GPU checks it before running anything.
struct ImageInfo {
  bool ptx = false;
  int sm = 0;       // the SM the CUBIN was built for, or the PTX .target
  char suffix = 0;  // 'a' (arch-specific), 'f' (family) or 0
  int ptxMajor = 0; // PTX ISA .version
  int ptxMinor = 0;
  std::set<std::string> kernels;
  std::string describe() const; // "sm_90a CUBIN", "PTX .target sm_80"
};

struct Function;
struct Module {
  Context *context = nullptr;
  ImageInfo image;
  std::map<std::string, Function *> functions;
};
struct Function {
  Module *module = nullptr;
  const HostKernel *kernel = nullptr;
};

// Objects whose destruction may call back into user code (HostWork::release) or free memory
// are moved here while the mutex is held and destroyed after it is released.
struct Graveyard {
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Capture>> captures;
  std::vector<std::unique_ptr<Event>> events;
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<std::unique_ptr<GraphExec>> execs;
  std::vector<std::unique_ptr<Module>> modules;
  std::vector<std::unique_ptr<Function>> functions;
  std::vector<Allocation> allocations;
  ~Graveyard();
};

struct Driver {
  std::mutex mutex;
  bool initialized = false;
  CUresult initResult = CUDA_ERROR_NOT_INITIALIZED;
  std::string initDetail;
  std::vector<std::unique_ptr<Device>> devices;
  std::map<uintptr_t, Allocation> allocations; // by base
  std::map<Stream *, std::unique_ptr<Stream>> streams;
  std::set<Capture *> captures; // every capture in progress, for the capture-mode rules
  std::map<Event *, std::unique_ptr<Event>> events;
  std::map<Graph *, std::unique_ptr<Graph>> graphs;
  std::map<GraphExec *, std::unique_ptr<GraphExec>> execs;
  std::map<Module *, std::unique_ptr<Module>> modules;
  std::map<Function *, std::unique_ptr<Function>> functions;
};

// The process's driver, never destroyed (destructors of static objects may still call it).
Driver &state();

// Errors. `fail` records `detail` as this thread's explanation of `code` (cuGetErrorString
// appends it), prints "cudasim: <api>: <detail>" once on stderr, and returns `code`.
CUresult fail(CUresult code, const std::string &detail);
const char *errorName(CUresult code);        // nullptr for an unknown code
const char *errorDescription(CUresult code); // nullptr for an unknown code
// This thread's last detail for `code`, or empty.
const std::string &lastDetail(CUresult code);

// Device / context checks, with the driver mutex held. `enterContext` requires cuInit, a current
// context on this thread that is alive, and (unless `allowSticky`) no sticky error; on success
// `*context` is the current context.
CUresult checkInitialized(const char *api);
CUresult enterContext(const char *api, Context **context, bool allowSticky = false);
Context *currentContext();
void setCurrentContext(Context *context);
CUresult raiseSticky(Context *context, CUresult code, const std::string &detail);

// Resolves `handle` for work in `context`: nullptr for the legacy default stream.
CUresult resolveStream(const char *api, CUstream handle, Context *context, Stream **stream);
std::string streamName(const Stream *stream);
std::string hexAddress(uintptr_t address);

// Capture-mode rules (cuThreadExchangeStreamCaptureMode): an unsafe call (allocation, free,
// synchronous copy) fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
// captures that forbid it; work on the legacy stream while a blocking stream of the context
// captures fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates that capture.
CUresult checkUnsafeCall(const char *api);
CUresult checkLegacyStreamUse(const char *api, Context *context);
void invalidateCapture(Capture &capture, const std::string &why);

// Memory. Ranges are device pointers that must lie inside one live allocation.
std::string describeBadRange(uintptr_t start, size_t bytes); // empty when the range is good
CUresult checkDeviceRange(const char *api, const char *role, uintptr_t start, size_t bytes);
Allocation *findAllocation(uintptr_t address);
// Maps a guarded region of `bytes` filled with 0xFF; the caller registers it.
CUresult mapAllocation(const char *api, size_t bytes, Allocation &allocation);
void unmapAllocation(const Allocation &allocation);
// Destroys what a context owns when its last retain is released.
void destroyContextResources(Context &context, Graveyard &graveyard);

// The cu*Destroy of a handle kept in one of Driver's maps: moves the object into `buried` (freed
// once the caller's Graveyard goes, after the mutex) or fails "<api>: 0x.. is not a live <kind>"
// with `notLive` (the code the NVIDIA driver returns for that kind of handle).
// Call with the mutex held and the driver initialized.
template <typename T, typename Handle>
CUresult buryLive(std::map<T *, std::unique_ptr<T>> &live, Handle handle, const char *api,
                  const char *kind, std::vector<std::unique_ptr<T>> &buried,
                  CUresult notLive = CUDA_ERROR_INVALID_VALUE) {
  auto it = live.find(reinterpret_cast<T *>(handle));
  if (it == live.end())
    return fail(notLive, std::string(api) + ": " + hexAddress(reinterpret_cast<uintptr_t>(handle)) +
                             " is not a live " + kind);
  buried.push_back(std::move(it->second));
  live.erase(it);
  return CUDA_SUCCESS;
}

// Work: run now (the stream is not capturing) or record. `submit` checks the context and stream
// and records or runs `node`; `validate` (optional) runs under the mutex after those checks.
CUresult submit(const char *api, CUstream stream, Node node,
                const std::function<CUresult(Context *)> &validate = {});
CUresult runNode(const Node &node, Context *context, bool replay);

// Module images: ELF CUBIN or PTX text, checked against `device`.
CUresult parseImage(const void *image, ImageInfo &info, std::string &detail);
CUresult checkImageForDevice(const ImageInfo &info, const Device &device, std::string &detail);

// Environment: KILN_CUDASIM_DEVICES, KILN_CUDASIM_SM, KILN_CUDASIM_MEMORY_MB.
CUresult configureDevices(Driver &d, std::string &detail);

} // namespace kiln::cudasim::driver

#pragma GCC visibility pop
