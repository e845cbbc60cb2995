// The hardware abstraction the executor runs a plan on. A backend allocates memory, copies to and
// from it, and runs one plan op at a time on buffers the executor bound at create. Two backends:
// cpu (cpu_device.h, the reference) and cuda (cuda/cuda_device.h: device memory + host-visible
// staging, ops prepared once so a launch is a table lookup, synchronize() at the end of a step so
// launches are asynchronous, and decode steps captured into CUDA graphs per batch bucket).
#pragma once

#include "runtime/base/status.h"
#include "runtime/ops/bound_op.h"
#include "schema/plan_generated.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::rt {

enum class DeviceKind : uint8_t { kCpu, kCuda };

enum class MemoryKind : uint8_t {
  kDevice,      // only device code touches it (CPU: ordinary host memory)
  kHostVisible, // also mapped for the host: step inputs staged every step
};

struct DeviceMemory {
  void *data = nullptr; // a device address (CPU: a host pointer)
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::kDevice;
  bool borrowed = false; // host bytes lent by importWeights; free() leaves them alone
};

// Memory of the device as its driver reports it (CPU: the host's physical memory).
struct DeviceMemoryInfo {
  size_t freeBytes = 0;
  size_t totalBytes = 0;
};

// A backend's ready-to-run form of one op, made once at Executor::create.
class PreparedOp {
public:
  virtual ~PreparedOp() = default;
};

// A recorded sequence of ops a device replays as one unit (a CUDA graph); opaque to the executor.
class CapturedProgram {
public:
  virtual ~CapturedProgram() = default;
};

// Timestamps taken in the order of a device's queued work, for profiling (kiln profile). mark(i)
// records timestamp i after everything queued so far; once the device's synchronize() returned,
// millisBetween(a, b) is the time from mark a to mark b. Not while capturing a graph.
class DeviceClock {
public:
  virtual ~DeviceClock() = default;
  virtual size_t size() const = 0;
  virtual Status mark(size_t index) = 0;
  virtual Result<double> millisBetween(size_t from, size_t to) const = 0;
};

// A clock reading the host's steady clock: right for devices whose runOp has finished the op's
// work when it returns (the cpu backend).
std::unique_ptr<DeviceClock> makeHostClock(size_t marks);

class Device {
public:
  virtual ~Device() = default;

  virtual const std::string &name() const = 0;
  virtual DeviceKind kind() const = 0;
  // The artifact target this device runs ("cpu", "sm_90a"): Plan.targets must list it.
  virtual const std::string &target() const = 0;

  // Called once by Executor::create before any prepareOp: checks that the artifact can run here and
  // loads what its ops need. The default accepts a plan whose targets list target() exactly; a
  // GPU backend also accepts compatible targets and loads the plan's kernel module for its SM.
  virtual Status loadPlan(const schema::Plan &plan);
  // Free and total memory now; the executor sizes the KV cache from it (--gpu-memory-utilization).
  virtual Result<DeviceMemoryInfo> memoryInfo() const = 0;

  virtual Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) = 0;
  // Releases `memory` (a no-op for borrowed memory) and clears it.
  virtual void free(DeviceMemory &memory) = 0;
  // Makes host bytes (a mapped weights file) readable by ops. The CPU backend borrows them
  // without copying, so they must outlive the returned memory; a GPU backend copies.
  virtual Result<DeviceMemory> importWeights(std::span<const uint8_t> hostBytes) = 0;
  virtual Status copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) = 0;
  virtual Status copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) = 0;

  // Checks that this backend supports the op as bound (dtypes, params) and prepares it.
  virtual Result<std::unique_ptr<PreparedOp>> prepareOp(const BoundOp &op) = 0;
  // Runs a prepared op for this step's counts. The executor has validated the step inputs.
  virtual Status runOp(const PreparedOp &op, const StepCounts &counts) = 0;
  // Waits for every queued op and copy.
  virtual Status synchronize() = 0;

  // Graphs (docs/design.md "The step program"). Between beginCapture() and endCapture() the runOp
  // calls are recorded, not run; replay() runs the recording with the pointers and counts it was
  // captured with (kernels read step inputs through pointers, so new inputs copied in before a
  // replay are seen). No allocation, copy or synchronize() may happen while capturing. The
  // defaults mean "no graphs": the executor then runs every op itself.
  virtual bool supportsGraphs() const { return false; }
  virtual Status beginCapture();
  // Ends the capture begun by beginCapture() (also after a failed runOp, to leave capture mode).
  virtual Result<std::unique_ptr<CapturedProgram>> endCapture();
  virtual Status replay(const CapturedProgram &program);

  // How a prepared op runs for these counts when the device has more than one way (a GPU Linear:
  // "gemv 1/warp" or "cublasLt 2/8", the candidate kept of those timed); "" otherwise. For kiln
  // profile.
  virtual std::string describeOp(const PreparedOp &, const StepCounts &) const { return ""; }

  // Greedy sampling on the device: ids[r] (int32, device memory) = the lowest id among the
  // largest finite values of row r of the fp32 `logits` [rows, vocab], -1 when none is finite
  // (runtime/sampling/sampler.h argmaxToken). Queued like an op; canArgmaxRows() says whether the
  // device (and, on a GPU, the loaded artifact's kernels) can.
  virtual bool canArgmaxRows() const { return false; }
  virtual Status argmaxRows(const void *logits, int32_t rows, int32_t vocab, void *ids);

  // A clock with `marks` timestamps (allocated now: marking allocates nothing). The default says
  // the device has none.
  virtual Result<std::unique_ptr<DeviceClock>> createClock(size_t marks);
};

// "cpu" -> the reference backend. "cuda" (GPU 0) or "cuda:N" -> the CUDA backend on GPU N; an
// error in builds without it. Other names: "unknown device 'x': expected cpu, cuda or cuda:N".
Result<std::unique_ptr<Device>> createDevice(const std::string &name);

// A device name taken apart: "cpu", "cuda" (ordinal 0) or "cuda:N".
struct DeviceName {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;
  bool explicitOrdinal = false; // "cuda:N" rather than "cuda"
};
Result<DeviceName> parseDeviceName(const std::string &name);

// The CUDA devices the driver reports. 0 with `reason` ("no CUDA driver found ...", "cuInit
// failed: ...", or a kiln built without the CUDA backend) when none can be used.
struct CudaDeviceCount {
  int count = 0;
  std::string reason;
};
CudaDeviceCount countCudaDevices(const std::string &driverLibrary = "libcuda.so.1");

} // namespace kiln::rt
