// Storage dtype of activations (`kiln compile --dtype`). The IR's activations are f32 tensors
// (logical values, like weights whose `dtype` says how they are stored); the model builder records
// the storage type for all of them as the module attribute kiln.activation_dtype, and this one rule
// turns it into each value's storage type, so plan-memory (arena sizes) and the plan emitter
// (Buffer.dtype) cannot disagree. Header-only: plan-memory (kiln_transforms) uses it without
// linking the emitter.
#pragma once

#include "compiler/dialect/kiln_dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::compiler {

// On the module: a TypeAttr (f32, f16 or bf16); absent means f32.
inline constexpr const char *kActivationDtypeAttr = "kiln.activation_dtype";
// On the module: what @step returns, kHiddenStatesOutput for an encoder (plan.fbs PlanOutput);
// absent means logits.
inline constexpr const char *kOutputAttr = "kiln.output";
inline constexpr const char *kHiddenStatesOutput = "hidden_states";

// The logits: the value @step returns and, at tp > 1, the lm_head shard its all_gather gathers;
// under soft-capping (Gemma 2) the softcap's input too.
// They stay f32 whatever --dtype says: the lm_head reads half activations and writes fp32 logits,
// which is what sampling needs and what cuBLASLt does natively.
inline bool isLogitsValue(mlir::Value value) {
  for (mlir::Operation *user : value.getUsers()) {
    if (mlir::isa<mlir::func::ReturnOp>(user))
      return true;
    if (auto gather = mlir::dyn_cast<AllGatherOp>(user);
        gather && isLogitsValue(gather.getResult()))
      return true;
    if (auto cap = mlir::dyn_cast<SoftcapOp>(user); cap && isLogitsValue(cap.getResult()))
      return true;
  }
  return false;
}

// The module's activation storage type (f32 when the attribute is absent).
inline mlir::Type moduleActivationType(mlir::ModuleOp module) {
  auto attr = module->getAttrOfType<mlir::TypeAttr>(kActivationDtypeAttr);
  return attr ? attr.getValue() : mlir::Float32Type::get(module.getContext());
}

// How an activation value is stored: f32 for the logits, the module's activation type otherwise.
inline mlir::Type activationStorageType(mlir::Value value) {
  mlir::MLIRContext *context = value.getContext();
  if (isLogitsValue(value))
    return mlir::Float32Type::get(context);
  mlir::Operation *scope = value.getParentRegion()->getParentOp();
  auto module = mlir::isa<mlir::ModuleOp>(scope) ? mlir::cast<mlir::ModuleOp>(scope)
                                                 : scope->getParentOfType<mlir::ModuleOp>();
  if (!module)
    return mlir::Float32Type::get(context);
  return moduleActivationType(module);
}

// Bytes of one element of an activation stored as `type` (f32, f16 or bf16).
inline int64_t storageBytes(mlir::Type type) {
  return static_cast<int64_t>(type.getIntOrFloatBitWidth() / 8);
}

} // namespace kiln::compiler
