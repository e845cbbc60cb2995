// Which instruction-set level the CPU kernels run at: detected once from the CPU (and the OS's
// saved vector state) at first use, or lowered with KILN_CPU_ISA=sse2|avx2|avx512|avx512bf16|amx so
// CI can run every level this machine has against the double-precision references. A level is
// only ever chosen when the CPU has it: the code for a wider level is never executed elsewhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::kernels::cpu {

enum class CpuIsa : uint8_t {
  kSse2,       // x86-64 baseline, 4 fp32 lanes
  kAvx2,       // AVX2 + FMA, 8 lanes
  kAvx512,     // AVX-512 F/BW/VL/DQ, 16 lanes
  kAvx512Bf16, // AVX-512 + BF16 (runs the kAvx512 kernels for now: see kernels/cpu/linear.cc)
  kAmx,        // AVX-512 + BF16 + AMX tiles (AMX-TILE, AMX-BF16), the OS's leave to use tile data
               // granted and a tile instruction seen to run (cpu_isa.cc): Linears with bf16
               // weights run on the tiles (linear_amx.cc), every other kernel as kAvx512Bf16
};

const char *cpuIsaName(CpuIsa isa);
// "sse2" -> kSse2 ...; false for an unknown name.
bool parseCpuIsa(std::string_view name, CpuIsa &isa);
// The highest level this CPU runs.
CpuIsa detectedCpuIsa();
// Whether this CPU converts fp16 to fp32 in vectors (F16C: every AVX2 CPU made has it, but a
// level does not require it): fp16 weights then run on the Linear panels from avx2 up.
bool cpuHasF16c();
// Whether this CPU has AVX512-VNNI and AVX512-VBMI (integer dot products and byte permutes): from
// the avx512 level up, Linears on int8 rows then run linear_quant_int8_vnni.cc.
bool cpuHasAvx512Vnni();
// Whether this CPU has AMX-INT8 (integer tile products): at the amx level, with cpuHasAvx512Vnni,
// Linears on int8 rows then run linear_quant_int8_amx.cc.
bool cpuHasAmxInt8();
// Every level this CPU runs, lowest first.
std::vector<CpuIsa> availableCpuIsas();

// The level the kernels use: the one set last, else KILN_CPU_ISA's when the CPU has it, else the
// detected one.
CpuIsa activeCpuIsa();
// Makes the kernels use `isa`; false (and nothing changes) when the CPU lacks it. Not to be called
// while kernels run.
bool setCpuIsa(CpuIsa isa);
// Checks KILN_CPU_ISA: "" when it is unset or names a level this CPU has, else why not (an
// unknown name, or a level above the detected one).
std::string cpuIsaEnvError();

} // namespace kiln::kernels::cpu
