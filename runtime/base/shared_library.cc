#include "runtime/base/shared_library.h"

#include <dlfcn.h>

#include <utility>

namespace kiln {

Result<SharedLibrary> SharedLibrary::open(const std::string &name, int extraFlags) {
  void *handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | extraFlags);
  if (!handle) {
    const char *error = dlerror();
    return unavailable(error ? error : "unknown dlopen error");
  }
  SharedLibrary library;
  library.handle_ = handle;
  library.name_ = name;
  return library;
}

SharedLibrary::SharedLibrary(SharedLibrary &&other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

SharedLibrary &SharedLibrary::operator=(SharedLibrary &&other) noexcept {
  if (this != &other) {
    if (handle_)
      dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_)
    dlclose(handle_);
}

void *SharedLibrary::symbol(const char *name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

} // namespace kiln
