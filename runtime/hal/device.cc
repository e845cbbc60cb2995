#include "runtime/hal/device.h"

#include "runtime/hal/cpu_device.h"
#ifdef KILN_HAVE_CUDA_BACKEND
#include "runtime/hal/cuda/cuda_device.h"
#endif

namespace kiln::rt {
namespace {

std::string joinTargets(const schema::Plan &plan) {
  std::string joined;
  if (plan.targets())
    for (const auto *t : *plan.targets())
      joined += (joined.empty() ? "" : ",") + t->str();
  return joined.empty() ? "(none)" : joined;
}

} // namespace

Status Device::loadPlan(const schema::Plan &plan) {
  if (plan.targets())
    for (const auto *t : *plan.targets())
      if (t->str() == target())
        return okStatus();
  return failedPrecondition("compiled for targets " + joinTargets(plan) +
                            "; this device is '" + target() + "': recompile with --target " +
                            target());
}

Result<std::unique_ptr<Device>> createDevice(const std::string &name) {
  if (name == "cpu")
    return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
#ifdef KILN_HAVE_CUDA_BACKEND
  if (name == "cuda")
    return createCudaDevice();
#endif
  if (name == "cuda")
    return unimplemented("device 'cuda': this kiln was built without the CUDA backend (use "
                         "--device cpu, or a kiln built with -DKILN_ENABLE_CUDA=ON)");
  return invalidArgument("unknown device '" + name + "': expected 'cpu' or 'cuda'");
}

} // namespace kiln::rt
