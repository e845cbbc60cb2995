// Decode-sized Linears on the plan's GEMV kernel (kernels/cuda/gemv.cuh) instead of cuBLASLt. The
// compiler names a GEMV kernel on every Linear it can run (Op.kernel); at load CudaDevice times it
// against cuBLASLt's choice for each row bucket of at most kGemvMaxRows rows and keeps whichever is
// faster (pickTimedAlgorithm's margin), so a GEMV that loses to cuBLASLt on some GPU costs nothing.
// Host-only planning here (no driver calls), checked in CI without a GPU.
#pragma once

#include "kernels/cuda/params.h"
#include "runtime/hal/cuda/cuda_launch.h"
#include "runtime/hal/device.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

enum class GemvMode : uint8_t {
  kAuto,   // timed against cuBLASLt per bucket; needs Linear autotuning (else never used)
  kAlways, // every bucket of at most kGemvMaxRows rows (tests, comparisons)
  kNever,
};
// KILN_LINEAR_GEMV=auto|always|never (default auto; other values: auto).
GemvMode gemvModeFromEnvironment();
// Whether GEMV launches may overlap the kernel before them (programmatic dependent launch, on
// sm_90 and later: the GEMV streams its first W vectors while that kernel finishes, then waits
// for it; kernels/cuda/common.cuh). KILN_GEMV_OVERLAP=0 turns it off; default on.
bool gemvOverlapFromEnvironment();

// Whether a plan of this schema version has GEMV kernels of today's launch contract (version.h
// kGemvSchemaVersion); an older plan's Linears run on cuBLASLt only.
bool planGemvUsable(uint32_t schemaVersion);

// The op's GEMV kernel symbol, or "" when it has none or cannot run on it: Op.kernel empty, x and
// W of different dtypes, or a bias that is not F32 (the kernel adds an fp32 bias).
std::string gemvSymbol(const BoundOp &op);

// A Linear's GEMV half: what a launch needs, and per cuBLASLt row bucket (linearRowBuckets of
// the op's maximum rows) how many W rows per warp the kernel runs it with, 0 for cuBLASLt.
struct GemvPlan {
  kernels::cuda::GemvParams params{}; // rows and outsPerWarp set per step
  schema::RowScale rowsRule = schema::RowScale::Tokens;
  int64_t maxRows = 0;
  std::vector<int32_t> outsPerWarpForBucket;
};
GemvPlan planGemv(const BoundOp &op);

// W rows per warp when the kernel runs without timing (KILN_LINEAR_GEMV=always): two for wide
// Linears, one otherwise (tools/bench/gemv_sweep.cu on an H200: one row per warp was the faster
// below about 16k outputs, two above).
int32_t defaultGemvOutsPerWarp(int32_t out);
// The kernel's W rows per warp for this step's rows, 0 when cuBLASLt runs them (rows outside
// 1..kGemvMaxRows or above the op's maximum, or a bucket that kept cuBLASLt).
int32_t gemvOutsPerWarp(const GemvPlan &plan, int64_t rows);
// The launch for `rows` rows at `outsPerWarp` W rows per warp: grid ceil(out /
// gemvOutputsPerCta(outsPerWarp)), kGemvThreads threads.
CudaLaunch gemvLaunch(const GemvPlan &plan, int32_t rows, int32_t outsPerWarp);

} // namespace kiln::rt
