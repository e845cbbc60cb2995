// cuBLASLt, loaded at run time like the driver (cuda_driver.h): a kiln built with the CUDA backend
// must start, and say "no GPU", on machines without the CUDA libraries, so nothing links
// libcublasLt. cublasLt.h is used for its types only. The entry points used here have the same
// signatures in cuBLAS 12 and 13, so either major version serves.
#pragma once

#include "runtime/base/shared_library.h"
#include "runtime/base/status.h"

#include <cublasLt.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

// X(member, exported symbol, the cublasLt.h declaration that gives the member's type)
#define KILN_CUBLASLT_FUNCTIONS(X)                                                                 \
  X(create, "cublasLtCreate", cublasLtCreate)                                                      \
  X(destroy, "cublasLtDestroy", cublasLtDestroy)                                                   \
  X(getVersion, "cublasLtGetVersion", cublasLtGetVersion)                                          \
  X(getStatusName, "cublasLtGetStatusName", cublasLtGetStatusName)                                 \
  X(getStatusString, "cublasLtGetStatusString", cublasLtGetStatusString)                           \
  X(matmulDescCreate, "cublasLtMatmulDescCreate", cublasLtMatmulDescCreate)                        \
  X(matmulDescDestroy, "cublasLtMatmulDescDestroy", cublasLtMatmulDescDestroy)                     \
  X(matmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", cublasLtMatmulDescSetAttribute)      \
  X(matrixLayoutCreate, "cublasLtMatrixLayoutCreate", cublasLtMatrixLayoutCreate)                  \
  X(matrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", cublasLtMatrixLayoutDestroy)               \
  X(matrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute",                                  \
    cublasLtMatrixLayoutSetAttribute)                                                              \
  X(preferenceCreate, "cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate)            \
  X(preferenceDestroy, "cublasLtMatmulPreferenceDestroy", cublasLtMatmulPreferenceDestroy)         \
  X(preferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute",                                \
    cublasLtMatmulPreferenceSetAttribute)                                                          \
  X(algoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", cublasLtMatmulAlgoGetHeuristic)            \
  X(algoCheck, "cublasLtMatmulAlgoCheck", cublasLtMatmulAlgoCheck)                                 \
  X(matmul, "cublasLtMatmul", cublasLtMatmul)

// The sonames tried in order: CUDA 13's, then CUDA 12's.
std::vector<std::string> defaultCublasLtLibraries();

// The resolved entry points; devices hold a shared_ptr, so it is never unloaded under them.
class CublasLt {
public:
  // dlopen the first of `libraries` that loads and dlsym every entry point. Creates no handle
  // (that needs a GPU). Errors: "cuBLASLt not found (tried libcublasLt.so.13, ...): ..." or the
  // missing symbol.
  static Result<std::shared_ptr<const CublasLt>> load(const std::vector<std::string> &libraries);
  CublasLt(const CublasLt &) = delete;
  CublasLt &operator=(const CublasLt &) = delete;

  // The soname that loaded, e.g. "libcublasLt.so.13".
  const std::string &library() const { return library_.name(); }
  // OK, or "<what> failed: CUBLAS_STATUS_X (<description>)".
  Status check(cublasStatus_t status, const std::string &what) const;
  std::string describe(cublasStatus_t status) const;

#define KILN_CUBLASLT_MEMBER(member, symbol, decl) decltype(&::decl) member = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_MEMBER)
#undef KILN_CUBLASLT_MEMBER

private:
  CublasLt() = default;
  SharedLibrary library_;
};

} // namespace kiln::rt
