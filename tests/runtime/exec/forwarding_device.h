// A Device that forwards everything to another one (the cpu device in tests), so a test can
// override one part of it: the memory the driver reports, or graph capture.
#pragma once

#include "runtime/hal/device.h"

namespace kiln::rt::testing {

class ForwardingDevice : public Device {
public:
  explicit ForwardingDevice(Device &inner) : inner_(inner) {}

  const std::string &name() const override { return inner_.name(); }
  DeviceKind kind() const override { return inner_.kind(); }
  const std::string &target() const override { return inner_.target(); }
  Status loadPlan(const schema::Plan &plan) override { return inner_.loadPlan(plan); }
  Result<DeviceMemoryInfo> memoryInfo() const override { return inner_.memoryInfo(); }
  Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) override {
    return inner_.allocate(bytes, kind);
  }
  void free(DeviceMemory &memory) override { inner_.free(memory); }
  Result<DeviceMemory> importWeights(std::span<const uint8_t> hostBytes) override {
    return inner_.importWeights(hostBytes);
  }
  Status copyToDevice(void *deviceDst, const void *hostSrc, size_t bytes) override {
    return inner_.copyToDevice(deviceDst, hostSrc, bytes);
  }
  Status copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) override {
    return inner_.copyToHost(hostDst, deviceSrc, bytes);
  }
  Result<std::unique_ptr<PreparedOp>> prepareOp(const BoundOp &op) override {
    return inner_.prepareOp(op);
  }
  Status runOp(const PreparedOp &op, const StepCounts &counts) override {
    return inner_.runOp(op, counts);
  }
  Status synchronize() override { return inner_.synchronize(); }

protected:
  Device &inner_;
};

} // namespace kiln::rt::testing
