#include "runtime/hal/cuda/cuda_gemv.h"

#include "runtime/hal/cuda/cuda_linear.h"
#include "schema/version.h"

#include <cstdlib>
#include <cstring>

namespace kiln::rt {

namespace kc = kiln::kernels::cuda;

GemvMode gemvModeFromEnvironment() {
  const char *value = std::getenv("KILN_LINEAR_GEMV");
  const std::string mode = value ? value : "";
  return mode == "always"  ? GemvMode::kAlways
         : mode == "never" ? GemvMode::kNever
                           : GemvMode::kAuto;
}

bool planGemvUsable(uint32_t schemaVersion) {
  return schemaVersion >= kGemvSchemaVersion;
}

bool gemvOverlapFromEnvironment() {
  const char *value = std::getenv("KILN_GEMV_OVERLAP");
  return !value || std::string(value) != "0";
}

std::string gemvSymbol(const BoundOp &op) {
  if (!op.op || op.op->params_type() != schema::OpParams::LinearParams || !op.op->kernel() ||
      op.op->kernel()->size() == 0 || op.inputs.size() < 2 || op.outputs.empty())
    return "";
  if (op.inputs[0].dtype != op.inputs[1].dtype)
    return "";
  if (op.inputs.size() > 2 && op.inputs[2].dtype != schema::DType::F32)
    return "";
  return op.op->kernel()->str();
}

GemvPlan planGemv(const BoundOp &op) {
  GemvPlan plan;
  const BoundBuffer &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs[0];
  plan.params.x = x.data;
  plan.params.w = w.data;
  plan.params.bias = op.inputs.size() > 2 ? static_cast<const float *>(op.inputs[2].data) : nullptr;
  plan.params.y = y.data;
  plan.params.out = static_cast<int32_t>(w.fixedRows);
  plan.rowsRule = x.rows;
  plan.maxRows = x.fixedRows;
  plan.outsPerWarpForBucket.assign(linearRowBuckets(static_cast<uint64_t>(x.fixedRows)).size(), 0);
  return plan;
}

int32_t defaultGemvOutsPerWarp(int32_t out) {
  constexpr int32_t kWide = 16384;
  return out >= kWide ? 2 : 1;
}

int32_t gemvOutsPerWarp(const GemvPlan &plan, int64_t rows) {
  if (rows < 1 || rows > kc::kGemvMaxRows || rows > plan.maxRows)
    return 0;
  const size_t bucket = linearRowBucket(linearRowBuckets(static_cast<uint64_t>(plan.maxRows)),
                                        static_cast<uint64_t>(rows));
  return bucket < plan.outsPerWarpForBucket.size() ? plan.outsPerWarpForBucket[bucket] : 0;
}

CudaLaunch gemvLaunch(const GemvPlan &plan, int32_t rows, int32_t outsPerWarp) {
  CudaLaunch launch;
  kc::GemvParams params = plan.params;
  params.rows = rows;
  params.outsPerWarp = outsPerWarp;
  static_assert(sizeof(params) <= sizeof(launch.params), "GemvParams too large");
  std::memcpy(launch.params.data(), &params, sizeof(params));
  launch.paramBytes = sizeof(params);
  const int32_t perCta = kc::gemvOutputsPerCta(outsPerWarp);
  launch.grid[0] = static_cast<uint32_t>((params.out + perCta - 1) / perCta);
  launch.block = kc::kGemvThreads;
  return launch;
}

} // namespace kiln::rt
