#include "kernels/cpu/activation_mode.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace kiln::kernels::cpu {
namespace {

bool parseMode(std::string_view name, CpuActivations &mode) {
  if (name == "fp32" || name == "int8") {
    mode = name == "int8" ? CpuActivations::kInt8 : CpuActivations::kF32;
    return true;
  }
  return false;
}

CpuActivations initialMode() {
  const char *env = std::getenv("KILN_CPU_ACTIVATIONS");
  CpuActivations mode = CpuActivations::kF32;
  if (env && *env)
    parseMode(env, mode);
  return mode;
}

std::atomic<CpuActivations> &active() {
  static std::atomic<CpuActivations> mode{initialMode()};
  return mode;
}

} // namespace

const char *cpuActivationsName(CpuActivations mode) {
  return mode == CpuActivations::kInt8 ? "int8" : "fp32";
}

CpuActivations activeCpuActivations() {
  return active().load(std::memory_order_relaxed);
}

void setCpuActivations(CpuActivations mode) {
  active().store(mode, std::memory_order_relaxed);
}

std::string cpuActivationsEnvError() {
  const char *env = std::getenv("KILN_CPU_ACTIVATIONS");
  CpuActivations mode;
  if (!env || !*env || parseMode(env, mode))
    return "";
  return std::string("KILN_CPU_ACTIVATIONS='") + env + "' is not a mode: use fp32 or int8";
}

} // namespace kiln::kernels::cpu
