#include "runtime/hal/device.h"

#include "runtime/hal/cpu_device.h"
#ifdef KILN_HAVE_CUDA_BACKEND
#include "runtime/hal/cuda/cuda_device.h"
#endif

#include <charconv>
#include <chrono>

namespace kiln::rt {
namespace {

std::string joinTargets(const schema::Plan &plan) {
  std::string joined;
  if (plan.targets())
    for (const auto *t : *plan.targets())
      joined += (joined.empty() ? "" : ",") + t->str();
  return joined.empty() ? "(none)" : joined;
}

class HostClock final : public DeviceClock {
public:
  explicit HostClock(size_t marks) : marks_(marks) {}
  size_t size() const override { return marks_.size(); }
  Status mark(size_t index) override {
    if (index >= marks_.size())
      return outOfRange("clock mark " + std::to_string(index) + " of " +
                        std::to_string(marks_.size()));
    marks_[index] = std::chrono::steady_clock::now();
    return okStatus();
  }
  Result<double> millisBetween(size_t from, size_t to) const override {
    if (from >= marks_.size() || to >= marks_.size())
      return outOfRange("clock marks " + std::to_string(from) + " and " + std::to_string(to) +
                        " of " + std::to_string(marks_.size()));
    return std::chrono::duration<double, std::milli>(marks_[to] - marks_[from]).count();
  }

private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

} // namespace

std::unique_ptr<DeviceClock> makeHostClock(size_t marks) {
  return std::make_unique<HostClock>(marks);
}

Result<std::unique_ptr<DeviceClock>> Device::createClock(size_t) {
  return unimplemented("device '" + name() + "' has no clock for profiling");
}

Status Device::argmaxRows(const void *, int32_t, int32_t, void *) {
  return unimplemented("device '" + name() + "' has no argmax of logits rows");
}

Status Device::loadPlan(const schema::Plan &plan) {
  if (plan.targets())
    for (const auto *t : *plan.targets())
      if (t->str() == target())
        return okStatus();
  return failedPrecondition("compiled for targets " + joinTargets(plan) + "; this device is '" +
                            target() + "': recompile with --target " + target());
}

Status Device::beginCapture() {
  return unimplemented("device '" + name() + "' does not capture graphs");
}

Result<std::unique_ptr<CapturedProgram>> Device::endCapture() {
  return unimplemented("device '" + name() + "' does not capture graphs");
}

Status Device::replay(const CapturedProgram &) {
  return unimplemented("device '" + name() + "' does not replay graphs");
}

Result<DeviceName> parseDeviceName(const std::string &name) {
  if (name == "cpu")
    return DeviceName{};
  if (name == "cuda")
    return DeviceName{DeviceKind::kCuda, 0, false};
  const std::string kPrefix = "cuda:";
  if (name.rfind(kPrefix, 0) == 0 && name.size() > kPrefix.size() &&
      name.size() <= kPrefix.size() + 4) { // at most 9999: more GPUs than any machine has
    int ordinal = 0;
    const char *begin = name.data() + kPrefix.size(), *end = name.data() + name.size();
    auto [ptr, error] = std::from_chars(begin, end, ordinal);
    if (error == std::errc() && ptr == end && ordinal >= 0)
      return DeviceName{DeviceKind::kCuda, ordinal, true};
  }
  return invalidArgument("unknown device '" + name + "': expected cpu, cuda or cuda:N");
}

CudaDeviceCount countCudaDevices(const std::string &driverLibrary) {
#ifdef KILN_HAVE_CUDA_BACKEND
  Result<std::shared_ptr<const CudaDriver>> driver = CudaDriver::load(driverLibrary);
  if (!driver.isOk())
    return {0, driver.status().message()};
  CUresult rc = (*driver)->init(0);
  if (rc != CUDA_SUCCESS)
    return {0, "cuInit failed: " + (*driver)->describe(rc) + " (driver " + driverLibrary + ")"};
  int count = 0;
  rc = (*driver)->deviceGetCount(&count);
  if (rc != CUDA_SUCCESS)
    return {0, "cuDeviceGetCount failed: " + (*driver)->describe(rc)};
  if (count == 0)
    return {0, "the driver (" + driverLibrary + ") sees no GPU"};
  return {count, ""};
#else
  (void)driverLibrary;
  return {0, "this kiln was built without the CUDA backend (-DKILN_ENABLE_CUDA=ON)"};
#endif
}

Result<std::unique_ptr<Device>> createDevice(const std::string &name) {
  KILN_ASSIGN_OR_RETURN(DeviceName parsed, parseDeviceName(name));
  if (parsed.kind == DeviceKind::kCpu) {
    KILN_RETURN_IF_ERROR(checkCpuKernelIsa());
    return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
  }
#ifdef KILN_HAVE_CUDA_BACKEND
  CudaDeviceOptions options;
  options.ordinal = parsed.ordinal;
  return createCudaDevice(options);
#else
  return unimplemented("device '" + name +
                       "': this kiln was built without the CUDA backend (use "
                       "--device cpu, or a kiln built with -DKILN_ENABLE_CUDA=ON)");
#endif
}

} // namespace kiln::rt
