#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>

namespace kiln::kernels::cpu {
namespace {

struct IsaName {
  CpuIsa isa;
  const char *name;
};
constexpr IsaName kNames[] = {{CpuIsa::kSse2, "sse2"},
                              {CpuIsa::kAvx2, "avx2"},
                              {CpuIsa::kAvx512, "avx512"},
                              {CpuIsa::kAvx512Bf16, "avx512bf16"}};

// libgcc's feature bits count AVX/AVX-512 only when the OS saves their registers (XGETBV), so a
// level reported here is one the process may execute.
CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16"))
    return CpuIsa::kAvx512Bf16;
  if (avx512)
    return CpuIsa::kAvx512;
  if (avx2)
    return CpuIsa::kAvx2;
#endif
  return CpuIsa::kSse2;
}

CpuIsa initialIsa() {
  const CpuIsa detected = detectedCpuIsa();
  CpuIsa requested;
  const char *env = std::getenv("KILN_CPU_ISA");
  if (env && *env && parseCpuIsa(env, requested) && requested <= detected)
    return requested;
  return detected;
}

std::atomic<CpuIsa> &active() {
  static std::atomic<CpuIsa> isa{initialIsa()};
  return isa;
}

} // namespace

const char *cpuIsaName(CpuIsa isa) {
  for (const IsaName &n : kNames)
    if (n.isa == isa)
      return n.name;
  return "unknown";
}

bool parseCpuIsa(std::string_view name, CpuIsa &isa) {
  for (const IsaName &n : kNames)
    if (name == n.name) {
      isa = n.isa;
      return true;
    }
  return false;
}

CpuIsa detectedCpuIsa() {
  static const CpuIsa detected = detect();
  return detected;
}

std::vector<CpuIsa> availableCpuIsas() {
  std::vector<CpuIsa> levels;
  for (const IsaName &n : kNames)
    if (n.isa <= detectedCpuIsa())
      levels.push_back(n.isa);
  return levels;
}

CpuIsa activeCpuIsa() {
  return active().load(std::memory_order_relaxed);
}

bool setCpuIsa(CpuIsa isa) {
  if (isa > detectedCpuIsa())
    return false;
  active().store(isa, std::memory_order_relaxed);
  return true;
}

std::string cpuIsaEnvError() {
  const char *env = std::getenv("KILN_CPU_ISA");
  if (!env || !*env)
    return "";
  CpuIsa requested;
  if (!parseCpuIsa(env, requested))
    return std::string("KILN_CPU_ISA='") + env + "' is not a level: use sse2, avx2, avx512 or " +
           "avx512bf16";
  if (requested > detectedCpuIsa())
    return std::string("KILN_CPU_ISA=") + env + " asks for more than this CPU has (its highest " +
           "level is " + cpuIsaName(detectedCpuIsa()) + ")";
  return "";
}

} // namespace kiln::kernels::cpu
