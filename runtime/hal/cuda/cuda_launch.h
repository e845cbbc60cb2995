// How the cuda backend turns a bound plan op and the step's counts into kernel launches: which
// kernel symbols an op names, the grid (plan GridRule, or the attention kernels' own rule), and
// the parameter struct of kernels/cuda/params.h. Pure host code with no driver calls, so CI
// checks it without a GPU.
#pragma once

#include "runtime/hal/device.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

// Split-K scratch of the decode attention kernels (kernels/cuda/params.h AttentionParams).
struct AttentionScratch {
  float *partialOut = nullptr;
  float *partialMax = nullptr;
  float *partialSum = nullptr;
};
// fp32 scratch bytes an attention op needs: maxBatch x heads x kMaxDecodeSplits x (headDim + 2).
size_t attentionScratchBytes(const BoundOp &op);

struct CudaLaunch {
  size_t kernel = 0; // index into kernelSymbols(op)
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block = 128;
  uint32_t sharedBytes = 0;
  alignas(8) std::array<uint8_t, 128> params{}; // one params.h struct, passed by value
  size_t paramBytes = 0;
};

// The kernel symbols of a plan op. Attention names three, comma-separated in Op.kernel:
// "<prefill>,<decode>,<decode_reduce>"; every other kernel op names one. Linear (cuBLASLt) is
// not a kernel. Errors name the op.
Result<std::vector<std::string>> kernelSymbols(const BoundOp &op);

// Checks what the launches rely on: arity, I32 step inputs, a KV cache for the layer, one
// activation dtype across the op's non-weight buffers.
Status checkCudaOp(const BoundOp &op);

// The launches of one op for this step, in order (decode attention: decode then reduce).
// Empty when the step has no rows for the op. Assumes checkCudaOp passed.
std::vector<CudaLaunch> planLaunches(const BoundOp &op, const StepCounts &counts,
                                     const AttentionScratch &scratch);

} // namespace kiln::rt
