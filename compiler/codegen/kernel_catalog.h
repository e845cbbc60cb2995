// What codegen does with the CUDA kernel templates the op table declares (runtime/ops/op_table.h:
// header, constants, parameter struct, grid rule per template): validate instances, compute their
// launch shape and generate the NVRTC source. Plain C++ (no MLIR, no NVRTC) so the plan emitter can
// ask for launch rules without compiling anything.
#pragma once

#include "runtime/base/status.h"
#include "runtime/ops/kernel_template.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::compiler {

// One specialization of a kernel template (runtime/ops/kernel_template.h); the templates come from
// the op table's entries (runtime/ops/op_table.h) and its auxiliary templates (argmax_rows).
using rt::KernelInstance;
using rt::kernelSymbol;
using rt::makeKernelInstance;

// How the plan launches an instance (schema GridRule): grid.x from the step's row count (or
// computed by the runtime for attention), grid.y = gridY, block = threads.
enum class GridRows : uint8_t {
  kRows,      // grid.x = rows of the op's output (Tokens / Logits rule of its buffer)
  kAttention, // the runtime computes the grid from the step counts (kernels/cuda/attention_*.cuh)
  kGemv,      // the runtime computes the grid from the op's out features (params.h GemvParams)
};
struct LaunchShape {
  GridRows gridRows = GridRows::kRows;
  int32_t gridY = 1;
  int32_t threads = 128;
  int32_t sharedBytes = 0; // dynamic shared memory; every kernel uses static shared memory today
};

// The op names kernel templates exist for, in a stable order.
const std::vector<std::string> &kernelOps();

// The template constants of `op`, in the template's argument order, and the parameter struct its
// entry point takes (kernels/cuda/params.h). Errors: an unknown op.
Result<std::vector<std::string>> kernelConstantNames(const std::string &op);
Result<std::string> kernelParamsType(const std::string &op);

// Checks op, symbol (a C identifier) and constants (exactly the op's, each in range).
Status validateKernelInstance(const KernelInstance &instance);
Result<LaunchShape> launchShapeOf(const KernelInstance &instance);

// One CUDA C++ translation unit defining every instance as an extern "C" __global__ entry point
// that calls its template. Includes resolve against kernelSourceHeaders().
Result<std::string> generateKernelSource(const std::vector<KernelInstance> &instances);

// The kernel template sources embedded at build time, by include name ("kiln/norm.cuh").
struct KernelHeader {
  std::string name;
  std::string text;
};
std::vector<KernelHeader> kernelSourceHeaders();

} // namespace kiln::compiler
