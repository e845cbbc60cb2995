#include "runtime/hal/cuda/cublaslt_library.h"

#include <dlfcn.h>

namespace kiln::rt {

std::vector<std::string> defaultCublasLtLibraries() {
  return {"libcublasLt.so.13", "libcublasLt.so.12"};
}

Result<std::shared_ptr<const CublasLt>> CublasLt::load(const std::vector<std::string> &libraries) {
  std::string tried, lastError;
  void *handle = nullptr;
  std::string loaded;
  for (const std::string &library : libraries) {
    // RTLD_LOCAL: its symbols must not satisfy other libraries' lookups by accident.
    handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    tried += (tried.empty() ? "" : ", ") + library;
    if (handle) {
      loaded = library;
      break;
    }
    const char *error = dlerror();
    lastError = error ? error : "unknown error";
  }
  if (!handle)
    return unavailable("cuBLASLt not found (tried " + (tried.empty() ? "nothing" : tried) +
                       "): the cuda backend runs Linear ops on it; install the CUDA 13 (or 12) "
                       "cuBLAS libraries or add their directory to LD_LIBRARY_PATH (dlopen: " +
                       lastError + ")");
  std::shared_ptr<CublasLt> lt(new CublasLt());
  lt->handle_ = handle;
  lt->library_ = loaded;
#define KILN_CUBLASLT_RESOLVE(member, symbol, decl)                                                \
  lt->member = reinterpret_cast<decltype(lt->member)>(dlsym(handle, symbol));                      \
  if (!lt->member)                                                                                 \
    return unavailable(                                                                            \
        "cuBLASLt " + loaded + " lacks " + symbol +                                                \
        ": it is older than the cuBLAS 12 API kiln uses; update the CUDA libraries");
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
  return std::shared_ptr<const CublasLt>(std::move(lt));
}

CublasLt::~CublasLt() {
  if (handle_)
    dlclose(handle_);
}

std::string CublasLt::describe(cublasStatus_t status) const {
  const char *name = getStatusName ? getStatusName(status) : nullptr;
  std::string described =
      name ? name : "cublasStatus_t " + std::to_string(static_cast<int>(status));
  const char *text = getStatusString ? getStatusString(status) : nullptr;
  if (text && *text)
    described += std::string(" (") + text + ")";
  return described;
}

Status CublasLt::check(cublasStatus_t status, const std::string &what) const {
  if (status == CUBLAS_STATUS_SUCCESS)
    return okStatus();
  return internalError(what + " failed: " + describe(status));
}

} // namespace kiln::rt
