// Internal to kiln_cpu_kernels: builds the functions of a file region for a wider instruction set
// than the binary's baseline, for the per-ISA kernel files (linear_avx2.cc, attention_amx.cc, ...):
//   KILN_TARGET_BEGIN("avx2,fma")  ...  KILN_TARGET_END
// placed after the file's #includes, so no header's inline function is built for the wider ISA
// (the linker could otherwise pick that copy for a baseline caller). GCC takes `#pragma GCC
// target`; clang ignores it and takes the same target as an attribute on every function declared
// in the region.
#pragma once

// The levels of cpu_isa.h as target strings; the _F16C ones add fp16 conversions for
// linear_panels_*.cc, whose fp16 path runs only where cpuHasF16c() (cpu_isa.h).
#define KILN_ISA_AVX2 "avx2,fma"
#define KILN_ISA_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"
#define KILN_ISA_AVX2_F16C "avx2,fma,f16c"
#define KILN_ISA_AVX512_F16C "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
// The avx512 level with VNNI and VBMI, for linear_quant_int8_vnni.cc (cpuHasAvx512Vnni).
#define KILN_ISA_AVX512_VNNI                                                                       \
  "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c"
#define KILN_ISA_AMX "amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"
// The amx level with AMX-INT8, VNNI and VBMI, for linear_quant_int8_amx.cc (cpuHasAmxInt8).
#define KILN_ISA_AMX_INT8                                                                          \
  "amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c"

#define KILN_PRAGMA(text) _Pragma(#text)
#ifdef __clang__
#define KILN_TARGET_BEGIN(isa)                                                                     \
  KILN_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define KILN_TARGET_END KILN_PRAGMA(clang attribute pop)
#else
#define KILN_TARGET_BEGIN(isa) KILN_PRAGMA(GCC push_options) KILN_PRAGMA(GCC target(isa))
#define KILN_TARGET_END KILN_PRAGMA(GCC pop_options)
#endif
