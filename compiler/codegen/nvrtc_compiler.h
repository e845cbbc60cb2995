// Compiles kernel instances with NVRTC into the artifact's kernel modules: one CUBIN per SM
// target plus one PTX for forward compatibility. Needs no GPU.
#pragma once

#include "compiler/codegen/kernel_catalog.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

enum class KernelImageFormat : uint8_t { kCubin, kPtx };

// One schema::KernelModule's content. PTX images are NUL-terminated (cuModuleLoadData takes the
// bytes as they are).
struct KernelModuleImage {
  std::string target; // "sm_90a", or "compute_80" for PTX
  KernelImageFormat format = KernelImageFormat::kCubin;
  std::vector<uint8_t> image;
  std::vector<std::string> kernels; // every instance's symbol
};

struct CodegenOptions {
  // NVRTC include paths for the CUDA headers; empty: $CUDA_HOME/include (+ /cccl) when set,
  // else the toolkit kiln was built with.
  std::vector<std::string> includePaths;
  bool lineInfo = false; // -lineinfo, for profilers
};

// The SM targets NVRTC accepts ("sm_75" ... "sm_121", "sm_90a", ...) parse as (number, suffix).
struct SmTarget {
  int number = 0;     // 90 for sm_90a
  std::string suffix; // "", "a" or "f"
  std::string name() const { return "sm_" + std::to_string(number) + suffix; }
};
Result<SmTarget> parseSmTarget(const std::string &target);

// CUBIN for each of `targets` ("sm_80", "sm_90a"; "cpu" is ignored) plus a PTX module for the
// lowest one (compute_XX without the arch-specific suffix, so any later GPU can JIT it). An
// NVRTC failure returns its log. Empty when no SM target is given.
Result<std::vector<KernelModuleImage>>
compileKernelModules(const std::vector<KernelInstance> &instances,
                     const std::vector<std::string> &targets, const CodegenOptions &options = {});

// One NVRTC compile of a translation unit that may include the embedded kernel headers
// ("kiln/norm.cuh"): arch "sm_90a" gives CUBIN and PTX, "compute_80" PTX only. Errors carry
// NVRTC's log.
struct CompiledSource {
  std::vector<uint8_t> cubin; // empty for a compute_XX compile
  std::vector<uint8_t> ptx;   // NUL-terminated
};
Result<CompiledSource> compileCudaSource(const std::string &source, const std::string &arch,
                                         const CodegenOptions &options = {});

// "13.0", from nvrtcVersion.
std::string nvrtcVersionString();

} // namespace kiln::compiler
