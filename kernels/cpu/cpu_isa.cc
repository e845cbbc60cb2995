#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace kiln::kernels::cpu {
namespace {

struct IsaName {
  CpuIsa isa;
  const char *name;
};
constexpr IsaName kNames[] = {{CpuIsa::kSse2, "sse2"},
                              {CpuIsa::kAvx2, "avx2"},
                              {CpuIsa::kAvx512, "avx512"},
                              {CpuIsa::kAvx512Bf16, "avx512bf16"},
                              {CpuIsa::kAmx, "amx"}};

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
// Linux keeps AMX's 8 KiB of tile data out of a process's saved state until the process asks for
// it (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; without it the first tile instruction
// raises SIGILL). Asked once for the whole process, threads included. Then a child process runs one
// tile instruction, so a hypervisor that reports AMX but does not let it run costs the level, not
// the process.
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

void runOneTileInstruction() {
  alignas(64) unsigned char config[64] = {};
  config[0] = 1;   // palette 1
  config[16] = 64; // tile 0: 64 bytes a row
  config[48] = 1;  // tile 0: 1 row
  asm volatile("ldtilecfg %0" ::"m"(config) : "memory");
  asm volatile("tilerelease" ::: "memory");
}

bool amxRuns() {
  // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16 (clang 14's __builtin_cpu_supports does
  // not know them).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) ||
      !(edx & (1u << 22)))
    return false;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return false;
  const pid_t child = fork();
  if (child < 0)
    return false;
  if (child == 0) {
    runOneTileInstruction();
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child)
    return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
#else
bool amxRuns() {
  return false;
}
#endif

// libgcc's feature bits count AVX/AVX-512 only when the OS saves their registers (XGETBV), so a
// level reported here is one the process may execute.
CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  const bool avx512bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (avx512bf16 && amxRuns())
    return CpuIsa::kAmx;
  if (avx512bf16)
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

// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"). The OS
// saving the registers F16C writes is what the avx2 level already checked; the panels use F16C
// only from that level up.
bool cpuHasF16c() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
#else
  return false;
#endif
}

// CPUID leaf 7, ECX bits 11 (AVX512_VNNI) and 1 (AVX512_VBMI); the avx512 level already checked
// that the OS saves the registers.
bool cpuHasAvx512Vnni() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 11)) != 0 &&
           (ecx & (1u << 1)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

// CPUID leaf 7, EDX bit 25 (AMX-INT8); the amx level already saw a tile instruction run.
bool cpuHasAmxInt8() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 25)) != 0;
  }();
  return has;
#else
  return false;
#endif
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
    return std::string("KILN_CPU_ISA='") + env + "' is not a level: use sse2, avx2, avx512, " +
           "avx512bf16 or amx";
  if (requested > detectedCpuIsa())
    return std::string("KILN_CPU_ISA=") + env + " asks for more than this CPU has (its highest " +
           "level is " + cpuIsaName(detectedCpuIsa()) + ")";
  return "";
}

} // namespace kiln::kernels::cpu
