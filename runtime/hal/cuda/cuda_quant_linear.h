// Linears with a quantized W on the GPU (kernels/cuda/quant.cuh, quant_gemm.cuh). Decode-sized
// steps (1 to kGemvMaxRows rows) run the GEMV on the packed bytes, which reads 1/2 (8-bit) or
// about 1/4 (4-bit) of a bf16 W's bytes. Larger steps run one of two paths, per row bucket of the
// op (linearRowBuckets):
//   tiles       the tile GEMM: W's runs decoded into shared memory next to the tensor cores (x of
//               a 16-bit type) or the CUDA cores (fp32), so no dequantized copy of W exists;
//   dequantize  W written in x's dtype into a workspace the device shares among its Linears (they
//               run one at a time on its stream) and cuBLASLt on it, as vLLM's AWQ path does
//               above a few hundred tokens: a long prefill is bound by the multiplies, and
//               cuBLASLt's are the faster, while re-writing W costs the same at any row count.
// Which one: KILN_QUANT_GEMM (QuantGemmMode); by default both are timed per bucket at load, as
// cuBLASLt's candidates are (cuda_linear.h), and the tile GEMM kept where it is clearly faster.
// A plan compiled before the tile GEMM (its Op.kernel names two kernels) always dequantizes.
// Host-only planning here (no driver calls), checked in CI without a GPU.
#pragma once

#include "kernels/cuda/params.h"
#include "runtime/base/status.h"
#include "runtime/ops/bound_op.h"
#include "runtime/ops/cuda_launch.h"
#include "schema/plan_generated.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

enum class QuantGemmMode : uint8_t {
  kAuto,       // timed per bucket at load when Linears are autotuned; else dequantize
  kTiles,      // the tile GEMM for every bucket (no workspace is allocated)
  kDequantize, // W dequantized for cuBLASLt for every bucket
};
// KILN_QUANT_GEMM's value, "auto" when unset.
std::string quantGemmFromEnvironment();
// "auto", "tiles" or "dequantize"; another value is an error naming KILN_QUANT_GEMM.
Result<QuantGemmMode> parseQuantGemmMode(const std::string &value);

struct QuantLinearPlan {
  std::string gemvSymbol;                // gemv_quant
  std::string gemmSymbol;                // gemm_quant; "" in a plan from before it
  std::string dequantSymbol;             // dequant_weights
  kernels::cuda::GemvQuantParams gemv{}; // rows set per step
  kernels::cuda::GemmQuantParams gemm{}; // rows set per step
  kernels::cuda::DequantParams dequant{};
  schema::RowScale rowsRule = schema::RowScale::Tokens;
  int64_t maxRows = 0;
  int32_t in = 0;
  std::vector<uint64_t> buckets; // linearRowBuckets(maxRows)
  // Per bucket of more than kGemvMaxRows rows: the tile GEMM (true) or dequantize (false).
  std::vector<bool> tilesForBucket;
};

// Whether the op is a Linear whose W (input 1) is quantized.
bool isQuantLinear(const BoundOp &op);
// The op's kernels (Op.kernel "<gemv_quant>,<gemm_quant>,<dequant_weights>", what
// compiler/driver/gpu_kernels.cc names for it, or the first and last of them in an older plan)
// and launch parameters, W dequantized into `workspace` (null: the tile GEMM only), every bucket
// on `tiles`' path (an older plan: dequantize); an error naming the op when the plan names other
// kernels (a cpu-only artifact) or x / y are not float.
Result<QuantLinearPlan> planQuantLinear(const BoundOp &op, void *workspace, bool tiles);
// Whether `rows` rows (more than kGemvMaxRows) run on the tile GEMM.
bool quantUsesTiles(const QuantLinearPlan &plan, int64_t rows);
// The op as cuBLASLt runs it: W replaced by the workspace, [out, in] in x's dtype.
BoundOp dequantizedLinear(const BoundOp &op, void *workspace);
// Bytes of the largest quantized W of the plan (any rank) in its Linear's x dtype; 0: none.
uint64_t dequantWorkspaceBytes(const schema::Plan &plan);
// The GEMV for `rows` (1..kGemvMaxRows) rows: one W row per warp.
CudaLaunch quantGemvLaunch(const QuantLinearPlan &plan, int32_t rows);
// W into the workspace: one run of 32 values per thread.
CudaLaunch dequantLaunch(const QuantLinearPlan &plan);
// The tile GEMM for `rows` rows: grid (ceil(rows / kTileRows), ceil(out / kTileCols)),
// kTileThreads threads.
CudaLaunch quantGemmLaunch(const QuantLinearPlan &plan, int32_t rows);

} // namespace kiln::rt
