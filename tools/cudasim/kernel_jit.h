// Kernels for the simulator, compiled on the host from the same templates NVRTC compiles
// (kernels/cuda): a codegen symbol (kiln_rms_norm_f32_64_64_f32) names its op and constants, so
// the simulated driver needs only the symbol a test or the runtime asks for. Each kernel is one
// shared object built by the host C++ compiler with device/cudasim_device.h forced in front,
// cached on disk under a name that hashes everything that went into it.
#pragma once

#include "compiler/codegen/kernel_catalog.h"
#include "runtime/base/status.h"
#include "tools/cudasim/grid_runner.h"

#include <cstddef>
#include <string>

namespace kiln::cudasim {

struct HostKernel {
  std::string symbol;
  KernelEntry entry = nullptr;
  size_t paramsBytes = 0;  // sizeof the kernel's parameter struct (kernels/cuda/params.h)
  unsigned maxThreads = 0; // its __launch_bounds__
};

// The op and constants a codegen symbol stands for (runtime/ops/kernel_template.h kernelSymbol),
// checked with validateKernelInstance. Errors name the symbol and what does not parse.
Result<compiler::KernelInstance> parseKernelSymbol(const std::string &symbol);

struct JitOptions {
  std::string compiler; // the host C++ compiler; default $KILN_CUDASIM_CXX, else the build's
  std::string cacheDir; // default $KILN_CUDASIM_CACHE, else <tmp>/kiln-cudasim-<uid>
};
JitOptions defaultJitOptions();

// The process-wide kernel cache. Thread safe; a symbol is compiled at most once per process.
class KernelJit {
public:
  static KernelJit &instance();
  // Compiles (or loads from the disk cache) and returns the kernel. The pointer stays valid for
  // the life of the process. Errors: the symbol does not parse, or the compiler failed (its
  // output and the command are in the message).
  Result<const HostKernel *> kernel(const std::string &symbol);

private:
  KernelJit();
  struct State;
  State *state_;
};

} // namespace kiln::cudasim
