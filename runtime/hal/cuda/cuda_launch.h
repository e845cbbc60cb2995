// How the cuda backend turns a bound plan op and the step's counts into kernel launches: which
// kernel symbols an op names, and the launches its op table entry (runtime/ops/op_table.h) makes,
// with the grid from the plan's GridRule where the entry leaves it to the plan. Pure host code
// with no driver calls, so CI checks it without a GPU.
#pragma once

#include "runtime/hal/device.h"
#include "runtime/ops/cuda_launch.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

// Device scratch bytes the op's launches need (split-K attention, routed MoE rows); 0 for most ops.
size_t opScratchBytes(const BoundOp &op);

// Op.kernel's comma-separated symbols as written (one empty symbol when it names none).
std::vector<std::string> splitKernelSymbols(const schema::Op &op);
// The kernel symbols of a plan op, comma-separated in Op.kernel, one per kernel template of its
// op table entry (attention: "<prefill>,<decode>,<decode_reduce>"). Library ops (Linear on
// cuBLASLt) and collectives have none. Errors name the op.
Result<std::vector<std::string>> kernelSymbols(const BoundOp &op);

// Checks what the launches rely on: arity, I32 step inputs, a KV cache for the layer, one
// activation dtype across the op's non-weight buffers.
Status checkCudaOp(const BoundOp &op);

// The launches of one op for this step, in order (decode attention: decode then reduce).
// Empty when the step has no rows for the op. Assumes checkCudaOp passed.
std::vector<CudaLaunch> planLaunches(const BoundOp &op, const StepCounts &counts,
                                     const OpScratch &scratch);

} // namespace kiln::rt
