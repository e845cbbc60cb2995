// Whether Linears with integer weights (Q8, Q4, Q4M, Q4Z of runtime/base/quant_layout.h) quantize
// their input rows to int8 and multiply integers, as llama.cpp does for its Q8_0 / Q4_0 files:
// KILN_CPU_ACTIVATIONS=int8, or setCpuActivations. The default, fp32, multiplies the fp32 rows by
// each weight's exact value (kernels/cpu/linear_quant.cc), which is what the transformers
// references check within 1e-4; int8 trades that for speed and is checked against references that
// quantize the rows the same way (kernels/cpu/linear_quant_int8.h has the rule). fp8 weights (Q8F,
// Q8F32) and every other op are unaffected.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::kernels::cpu {

enum class CpuActivations : uint8_t { kF32, kInt8 };

const char *cpuActivationsName(CpuActivations mode); // "fp32", "int8"
// The mode set last, else KILN_CPU_ACTIVATIONS's, else kF32.
CpuActivations activeCpuActivations();
// Not to be called while kernels run; weights need no repacking (both modes read the same panels).
void setCpuActivations(CpuActivations mode);
// "" when KILN_CPU_ACTIVATIONS is unset, "fp32" or "int8", else why it is refused.
std::string cpuActivationsEnvError();

} // namespace kiln::kernels::cpu
