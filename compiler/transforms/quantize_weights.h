// Which weights a compile stores quantized (schema/plan.fbs Q8, Q4, Q4M, Q4Z): the matrices that
// only linears (as w; not a mixture-of-experts router's), embeddings (as the table) and
// mixture-of-experts layers (as stacked experts) read, marked on the built graph before tensor
// parallelism and fusion, which carry the marks along (a fused linear's parts must agree).
// Either every such matrix in one format (`kiln compile --quantize`), or each in the format its
// checkpoint tensors are stored in, where kiln keeps that form packed (a GGUF file's Q8_0, Q4_0
// and Q4_1 blocks: compiler/import/gguf_checkpoint.h); the others stay in the weight's dtype.
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/import/checkpoint.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace kiln::compiler {

struct QuantizePolicy {
  std::optional<WeightQuant> all;         // every eligible matrix (groupSize 0: one group per row)
  const Checkpoint *packedFrom = nullptr; // else: each as its source tensors are packed, if so
};

// Marks the eligible weights; a matrix the requested group does not divide is an error naming the
// weight, its columns and the group (emitted on the weight op).
mlir::LogicalResult quantizeWeights(mlir::ModuleOp module, const QuantizePolicy &policy);

} // namespace kiln::compiler
