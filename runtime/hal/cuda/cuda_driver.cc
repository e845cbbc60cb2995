#include "runtime/hal/cuda/cuda_driver.h"

namespace kiln::rt {

Result<std::shared_ptr<const CudaDriver>> CudaDriver::load(const std::string &library) {
  Result<SharedLibrary> opened = SharedLibrary::open(library);
  if (!opened.isOk())
    return unavailable("no CUDA driver found (" + library + "): this machine has no NVIDIA GPU" +
                       " or its driver is not installed (dlopen: " + opened.status().message() +
                       ")");
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->library_ = std::move(opened).value();
#define KILN_CUDA_DRIVER_RESOLVE(member, exported, decl)                                           \
  driver->member = reinterpret_cast<decltype(driver->member)>(driver->library_.symbol(exported));  \
  if (!driver->member)                                                                             \
    return unavailable("CUDA driver " + library + " lacks " + exported +                           \
                       ": the driver is older than kiln's CUDA 13 toolkit; update the driver");
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DRIVER_RESOLVE)
#undef KILN_CUDA_DRIVER_RESOLVE
  return std::shared_ptr<const CudaDriver>(std::move(driver));
}

std::string CudaDriver::describe(CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  if (getErrorName(result, &name) != CUDA_SUCCESS || !name)
    return "CUresult " + std::to_string(static_cast<int>(result));
  std::string described = name;
  if (getErrorString(result, &text) == CUDA_SUCCESS && text)
    described += std::string(" (") + text + ")";
  return described;
}

Status CudaDriver::check(CUresult result, const std::string &what) const {
  if (result == CUDA_SUCCESS)
    return okStatus();
  return internalError(what + " failed: " + describe(result));
}

} // namespace kiln::rt
