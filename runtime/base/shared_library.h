// A shared library opened at run time (dlopen) and closed with its last owner: how the CUDA
// driver, cuBLASLt and NCCL are reached, so a kiln built with them still starts without them.
#pragma once

#include "runtime/base/status.h"

#include <string>

namespace kiln {

class SharedLibrary {
public:
  // RTLD_NOW | RTLD_LOCAL (its symbols never satisfy other libraries' lookups) plus `extraFlags`
  // (e.g. RTLD_NODELETE). The error's message is dlerror()'s text alone, for callers to wrap.
  static Result<SharedLibrary> open(const std::string &name, int extraFlags = 0);

  SharedLibrary() = default;
  SharedLibrary(SharedLibrary &&other) noexcept;
  SharedLibrary &operator=(SharedLibrary &&other) noexcept;
  SharedLibrary(const SharedLibrary &) = delete;
  SharedLibrary &operator=(const SharedLibrary &) = delete;
  ~SharedLibrary();

  // The exported symbol's address, or nullptr when the library lacks it.
  void *symbol(const char *name) const;
  const std::string &name() const { return name_; }

private:
  void *handle_ = nullptr;
  std::string name_;
};

} // namespace kiln
