// GPU targets of `kiln compile`: which --target values name an SM, and the CUDA kernels an
// artifact carries for them (NVRTC modules, Op.kernel, Op.grid, Plan.cuda_version). Without the
// CUDA code generator (KILN_ENABLE_CUDA=OFF) every SM target is refused with a clear error.
#pragma once

#include "compiler/driver/compile.h"
#include "compiler/import/hf_config.h"
#include "schema/plan_generated.h"

#include <ostream>
#include <string>

namespace kiln::compiler {

// True when this kiln was built with the NVRTC code generator.
bool gpuCodegenAvailable();

// Checks one non-cpu --target value: an SM target NVRTC compiles for ("sm_80", "sm_90a").
Status checkGpuTarget(const std::string &target);

// For the SM targets in `options.targets` (none: nothing to do): compiles the model's kernels
// with NVRTC (one CUBIN per SM plus one PTX), stores them in plan.kernel_modules, names each
// non-library op's kernel(s) and launch rule, and sets plan.cuda_version. Logs
// "codegen: N kernels for sm_80, sm_90a (X s)" to `log` when given.
Status attachGpuKernels(const CompileOptions &options, const HfModelConfig &config,
                        schema::PlanT &plan, std::ostream *log);

} // namespace kiln::compiler
