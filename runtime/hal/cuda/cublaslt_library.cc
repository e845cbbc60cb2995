#include "runtime/hal/cuda/cublaslt_library.h"

namespace kiln::rt {

std::vector<std::string> defaultCublasLtLibraries() {
  return {"libcublasLt.so.13", "libcublasLt.so.12"};
}

Result<std::shared_ptr<const CublasLt>> CublasLt::load(const std::vector<std::string> &libraries) {
  std::string tried, lastError = "unknown error";
  std::shared_ptr<CublasLt> lt(new CublasLt());
  for (const std::string &library : libraries) {
    tried += (tried.empty() ? "" : ", ") + library;
    Result<SharedLibrary> opened = SharedLibrary::open(library);
    if (opened.isOk()) {
      lt->library_ = std::move(opened).value();
      break;
    }
    lastError = opened.status().message();
  }
  if (lt->library_.name().empty())
    return unavailable("cuBLASLt not found (tried " + (tried.empty() ? "nothing" : tried) +
                       "): the cuda backend runs Linear ops on it; install the CUDA 13 (or 12) "
                       "cuBLAS libraries or add their directory to LD_LIBRARY_PATH (dlopen: " +
                       lastError + ")");
  const std::string &loaded = lt->library_.name();
#define KILN_CUBLASLT_RESOLVE(member, exported, decl)                                              \
  lt->member = reinterpret_cast<decltype(lt->member)>(lt->library_.symbol(exported));              \
  if (!lt->member)                                                                                 \
    return unavailable(                                                                            \
        "cuBLASLt " + loaded + " lacks " + exported +                                              \
        ": it is older than the cuBLAS 12 API kiln uses; update the CUDA libraries");
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
  return std::shared_ptr<const CublasLt>(std::move(lt));
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
