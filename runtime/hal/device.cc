#include "runtime/hal/device.h"

#include "runtime/hal/cpu_device.h"
#ifdef KILN_HAVE_CUDA_BACKEND
#include "runtime/hal/cuda/cuda_device.h"
#endif

namespace kiln::rt {

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
