#include "runtime/hal/cpu_device.h"

#include "kernels/cpu/activation_mode.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/worker_pool.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/plan_types.h"
#include "runtime/sampling/sampler.h"

#include <cstdlib>
#include <cstring>
#include <span>
#include <sys/mman.h>
#include <unistd.h>

namespace kiln::rt {
namespace {

// 64-byte alignment: a cache line, and what the kernels' vector loops like.
constexpr size_t kCpuAlignment = 64;

// Pages of stored weights the kernels no longer read (packed copies replace them): handed back so
// they do not count twice in the process's memory. MADV_PAGEOUT reclaims without discarding: a
// page of the mapped artifact is read again from the file, an anonymous one swapped back in, if
// anything reads it later (a tied embedding table's rows). Only whole pages inside the range.
void releasePages(std::span<const uint8_t> bytes) {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes.size()) / page * page;
  if (last > first)
    madvise(reinterpret_cast<void *>(first), last - first, MADV_PAGEOUT); // a hint: may do nothing
#else
  (void)bytes;
#endif
}

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};

class CpuPreparedOp final : public PreparedOp {
public:
  CpuPreparedOp(CpuOpFn fn, BoundOp bound) : fn_(fn), bound_(std::move(bound)) {}
  void run(const StepCounts &counts) const { fn_(bound_, counts); }

  // The weights in the kernel's own layout, when the op's entry has one at this CPU's level.
  Status packWeights(const OpEntry &entry) {
    if (!entry.cpuPackedBytes || !entry.packCpuWeights)
      return okStatus();
    const size_t bytes = entry.cpuPackedBytes(bound_);
    if (bytes == 0)
      return okStatus();
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    packed_.reset(std::aligned_alloc(kCpuAlignment, rounded));
    if (!packed_)
      return resourceExhausted("cpu: out of host memory packing the weights of " +
                               opLabel(*bound_.op) + " (" + std::to_string(bytes) + " bytes)");
    for (std::span<const uint8_t> stored : entry.packCpuWeights(bound_, packed_.get()))
      releasePages(stored);
    bound_.cpuPackedWeights = packed_.get();
    return okStatus();
  }

private:
  CpuOpFn fn_;
  BoundOp bound_;
  std::unique_ptr<void, FreeDeleter> packed_;
};

} // namespace

std::string cpuKernelIsa() {
  namespace kc = kernels::cpu;
  const kc::CpuIsa active = kc::activeCpuIsa(), detected = kc::detectedCpuIsa();
  std::string isa = kc::cpuIsaName(active);
  if (active != detected)
    isa += std::string(" (cpu: ") + kc::cpuIsaName(detected) + ")";
  return isa;
}

std::vector<std::string> cpuKernelIsasAvailable() {
  std::vector<std::string> names;
  for (kernels::cpu::CpuIsa isa : kernels::cpu::availableCpuIsas())
    names.emplace_back(kernels::cpu::cpuIsaName(isa));
  return names;
}

int cpuKernelThreads() {
  return kernels::cpu::cpuThreads();
}

std::string cpuKernelActivations() {
  return kernels::cpu::cpuActivationsName(kernels::cpu::activeCpuActivations());
}

Status checkCpuKernelIsa() {
  std::string why = kernels::cpu::cpuIsaEnvError();
  if (why.empty())
    why = kernels::cpu::cpuActivationsEnvError();
  return why.empty() ? okStatus() : invalidArgument(why);
}

CpuDevice::CpuDevice() = default;

Result<DeviceMemoryInfo> CpuDevice::memoryInfo() const {
  long pageSize = sysconf(_SC_PAGESIZE);
  long pages = sysconf(_SC_PHYS_PAGES);
  long available = sysconf(_SC_AVPHYS_PAGES);
  if (pageSize <= 0 || pages <= 0 || available < 0)
    return unavailable("cpu: the host's memory size is unknown (sysconf failed)");
  return DeviceMemoryInfo{size_t(available) * size_t(pageSize), size_t(pages) * size_t(pageSize)};
}

Result<DeviceMemory> CpuDevice::allocate(size_t bytes, MemoryKind kind) {
  size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  if (rounded < bytes)
    return resourceExhausted("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
  DeviceMemory memory;
  memory.kind = kind;
  memory.bytes = bytes;
  if (rounded == 0)
    return memory;
  memory.data = std::aligned_alloc(kCpuAlignment, rounded);
  if (!memory.data)
    return resourceExhausted("cpu: out of host memory allocating " + std::to_string(bytes) +
                             " bytes");
  // Zeroed so a step never reads stale bytes from a previous model or step as a value.
  std::memset(memory.data, 0, rounded);
  return memory;
}

void CpuDevice::free(DeviceMemory &memory) {
  if (!memory.borrowed)
    std::free(memory.data);
  memory = DeviceMemory();
}

Result<DeviceMemory> CpuDevice::importWeights(std::span<const uint8_t> hostBytes) {
  DeviceMemory memory;
  // Kernels only read weights; the const_cast keeps DeviceMemory one type for every backend.
  memory.data = const_cast<uint8_t *>(hostBytes.data());
  memory.bytes = hostBytes.size();
  memory.kind = MemoryKind::kHostVisible;
  memory.borrowed = true;
  return memory;
}

Status CpuDevice::copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) {
  if (bytes)
    std::memcpy(deviceDst, hostSrc, bytes);
  return okStatus();
}

Status CpuDevice::copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) {
  if (bytes)
    std::memcpy(hostDst, deviceSrc, bytes);
  return okStatus();
}

Result<std::unique_ptr<PreparedOp>> CpuDevice::prepareOp(const BoundOp &op) {
  KILN_ASSIGN_OR_RETURN(CpuOpFn fn, selectCpuOp(op));
  auto prepared = std::make_unique<CpuPreparedOp>(fn, op);
  KILN_RETURN_IF_ERROR(prepared->packWeights(*findOp(op.op->params_type())));
  return std::unique_ptr<PreparedOp>(std::move(prepared));
}

Status CpuDevice::runOp(const PreparedOp &op, const StepCounts &counts) {
  // Only this device prepares the ops it runs, so the downcast is safe.
  static_cast<const CpuPreparedOp &>(op).run(counts);
  return okStatus();
}

Status CpuDevice::argmaxRows(const void *logits, int32_t rows, int32_t vocab, void *ids) {
  const auto *x = static_cast<const float *>(logits);
  auto *out = static_cast<int32_t *>(ids);
  for (int32_t r = 0; r < rows; ++r)
    out[r] = argmaxToken(std::span<const float>(x + static_cast<size_t>(r) * vocab, vocab));
  return okStatus();
}

} // namespace kiln::rt
