// A Device that forwards everything to another one (the cpu device in tests), so a test can
// override one part of it: the memory the driver reports, graph capture, failing ops or copies.
#pragma once

#include "runtime/hal/device.h"

#include <memory>

namespace kiln::rt::testing {

class ForwardingDevice : public Device {
public:
  explicit ForwardingDevice(Device &inner) : inner_(inner) {}
  // Owns the device it forwards to: for a device handed over as a unique_ptr<Device> (one per
  // rank, from a MultiRankOptions.deviceFactory).
  explicit ForwardingDevice(std::unique_ptr<Device> owned)
      : owned_(std::move(owned)), inner_(*owned_) {}

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

private:
  std::unique_ptr<Device> owned_; // before inner_: initialised first

protected:
  Device &inner_;
};

} // namespace kiln::rt::testing
