// The kiln dialect (ops defined in kiln_ops.td) plus the small queries that passes and the plan
// emitter share: which values are activations and how their rows scale at run time.
#pragma once

// Generated op headers expect the bytecode interface to be declared first (docs/toolchain.md).
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "runtime/base/quant_layout.h"

#include "compiler/dialect/kiln_dialect.h.inc"
#include "compiler/dialect/kiln_enums.h.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/kiln_ops.h.inc"

#include <optional>
#include <string>

namespace kiln::compiler {

// How a value's dim 0 scales at run time (mirrors schema::RowScale without depending on it).
enum class Rows { kFixed, kTokens, kSequences, kLogits };

// Activations are the values the plan places in the arena: every result of a compute op. Weights,
// constants and step inputs live elsewhere.
bool isActivation(mlir::Value value);
// Tokens for everything derived from token rows, Logits downstream of gather_rows.
Rows rowsOf(mlir::Value value);
// The step input's run-time rows rule (block tables: one row per sequence).
Rows stepInputRows(StepInputKind kind);
// The gated MLP's activation: the kiln.silu or kiln.gelu_tanh operand of `mul` (either side; the
// product commutes), with `other` set to mul's other operand; null when there is none.
mlir::Operation *gateActivation(MulOp mul, mlir::Value &other);

// A kiln.weight stored quantized (its quant and group_size attributes), or nullopt.
struct WeightQuant {
  QuantFormat format = QuantFormat::kQ8;
  // Columns per scale; 0: one scale per row of the checkpoint tensor, which stays one per row of
  // any column slice of it (a row-parallel shard keeps the row's scale).
  int64_t groupSize = 0;
  bool operator==(const WeightQuant &) const = default;
};
std::optional<WeightQuant> weightQuant(WeightOp weight);
void setWeightQuant(WeightOp weight, std::optional<WeightQuant> quant);

// Op names ("layers.3.attn.qkv") travel as NameLoc locations; "" when the op has none.
std::string opName(mlir::Operation *op);
mlir::Location namedLoc(mlir::MLIRContext *context, llvm::StringRef name);

} // namespace kiln::compiler
