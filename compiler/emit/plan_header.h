// Everything in the plan besides the step program: model metadata, compiled limits, KV cache
// spec, versions and targets.
#pragma once

#include "compiler/emit/plan_emitter.h"

namespace kiln::compiler {

mlir::LogicalResult fillPlanHeader(mlir::ModuleOp module, const HfModelConfig &config,
                                   const Checkpoint &checkpoint,
                                   const EmitOptions &options, schema::PlanT &plan);

} // namespace kiln::compiler
