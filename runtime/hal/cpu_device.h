// The reference backend: host memory, ops run synchronously by the kernels in kernels/cpu
// (split across threads by kernels/cpu/worker_pool.h). What CI runs, and what every GPU backend is checked against.
#pragma once

#include "runtime/hal/device.h"
#include "runtime/ops/op_table.h"

namespace kiln::rt {

class CpuDevice final : public Device {
public:
  CpuDevice();

  const std::string &name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  const std::string &target() const override { return name_; }

  Result<DeviceMemoryInfo> memoryInfo() const override;
  Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) override;
  void free(DeviceMemory &memory) override;
  Result<DeviceMemory> importWeights(std::span<const uint8_t> hostBytes) override;
  Status copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) override;
  Status copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) override;

  Result<std::unique_ptr<PreparedOp>> prepareOp(const BoundOp &op) override;
  Status runOp(const PreparedOp &op, const StepCounts &counts) override;
  Status synchronize() override { return okStatus(); }
  // runOp returns when the op is done, so the host's clock times it.
  Result<std::unique_ptr<DeviceClock>> createClock(size_t marks) override {
    return makeHostClock(marks);
  }
  bool canArgmaxRows() const override { return true; }
  Status argmaxRows(const void *logits, int32_t rows, int32_t vocab, void *ids) override;

private:
  std::string name_ = "cpu";
};

// The instruction-set level the cpu kernels run at (kernels/cpu/cpu_isa.h), e.g. "avx2", and the
// highest this CPU has: "avx2 (cpu: avx512bf16)" when KILN_CPU_ISA lowered it.
std::string cpuKernelIsa();
// Every level this CPU runs, lowest first ("sse2", "avx2", ...): what KILN_CPU_ISA may name.
std::vector<std::string> cpuKernelIsasAvailable();
// What Linears with integer weights multiply (kernels/cpu/activation_mode.h): "fp32", or "int8"
// when KILN_CPU_ACTIVATIONS=int8 asked for rows quantized to int8.
std::string cpuKernelActivations();
// Threads the calling thread's cpu kernels run on (kernels/cpu/worker_pool.h).
int cpuKernelThreads();
// Fails when KILN_CPU_ISA names no level, or one above what this CPU has, or KILN_CPU_ACTIVATIONS
// no mode (createDevice("cpu") calls it, so such a run stops before a step rather than silently
// running another level or mode).
Status checkCpuKernelIsa();

// The op's cpu function from the op table (OpEntry::runCpu) after checking the bound dtypes; an
// error names the op and the buffer.
Result<CpuOpFn> selectCpuOp(const BoundOp &op);

} // namespace kiln::rt
