// Linears with a quantized W on the GPU (kernels/cuda/quant.cuh). Decode-sized steps (1 to
// kGemvMaxRows rows) run the GEMV on the packed bytes, which reads 1/2 (8-bit) or about 1/4 (4-bit)
// of a bf16 W's bytes; larger steps write W in x's dtype into a workspace the device shares among
// its Linears (they run one at a time on its stream) and run cuBLASLt on it, as vLLM's AWQ path
// does above a few hundred tokens: a prefill is bound by the multiplies, not by reading W once.
// Host-only planning here (no driver calls), checked in CI without a GPU.
#pragma once

#include "kernels/cuda/params.h"
#include "runtime/base/status.h"
#include "runtime/ops/bound_op.h"
#include "runtime/ops/cuda_launch.h"
#include "schema/plan_generated.h"

#include <cstdint>
#include <string>

namespace kiln::rt {

struct QuantLinearPlan {
  std::string gemvSymbol;                // gemv_quant
  std::string dequantSymbol;             // dequant_weights
  kernels::cuda::GemvQuantParams gemv{}; // rows set per step
  kernels::cuda::DequantParams dequant{};
  schema::RowScale rowsRule = schema::RowScale::Tokens;
  int64_t maxRows = 0;
  int32_t in = 0;
};

// Whether the op is a Linear whose W (input 1) is quantized.
bool isQuantLinear(const BoundOp &op);
// The op's kernels (Op.kernel "<gemv_quant>,<dequant_weights>", what compiler/driver/gpu_kernels.cc
// names for it) and launch parameters, W dequantized into `workspace`; an error naming the op when
// the plan names other kernels (a cpu-only artifact) or x / y are not float.
Result<QuantLinearPlan> planQuantLinear(const BoundOp &op, void *workspace);
// The op as cuBLASLt runs it: W replaced by the workspace, [out, in] in x's dtype.
BoundOp dequantizedLinear(const BoundOp &op, void *workspace);
// Bytes of the largest quantized W of the plan (any rank) in its Linear's x dtype; 0: none.
uint64_t dequantWorkspaceBytes(const schema::Plan &plan);
// The GEMV for `rows` (1..kGemvMaxRows) rows: one W row per warp.
CudaLaunch quantGemvLaunch(const QuantLinearPlan &plan, int32_t rows);
// W into the workspace: one run of 32 values per thread.
CudaLaunch dequantLaunch(const QuantLinearPlan &plan);

} // namespace kiln::rt
