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

// The op's GEMV kernel symbol, or "" when it has none or cannot run on it: Op.kernel empty, x and
// W of different dtypes, or a bias that is not F32 (the kernel adds an fp32 bias).
std::string gemvSymbol(const BoundOp &op);

// A Linear's GEMV half: what a launch needs, and per cuBLASLt row bucket (linearRowBuckets of
// the op's maximum rows) whether the kernel runs it.
struct GemvPlan {
  kernels::cuda::GemvParams params{}; // rows set per step
  schema::RowScale rowsRule = schema::RowScale::Tokens;
  int64_t maxRows = 0;
  std::vector<bool> useForBucket;
};
GemvPlan planGemv(const BoundOp &op);

// Whether this step's rows run on the kernel (rows in 1..kGemvMaxRows and its bucket chose it).
bool gemvRuns(const GemvPlan &plan, int64_t rows);
// The launch for `rows` rows: grid ceil(out / kGemvOutputsPerCta), kGemvThreads threads.
CudaLaunch gemvLaunch(const GemvPlan &plan, int32_t rows);

} // namespace kiln::rt
