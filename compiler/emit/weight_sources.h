// Binding kiln.weight ops to checkpoint tensors and producing their stored bytes lazily (the
// artifact writer calls the producers one weight at a time, so a large model never has to fit
// in memory twice).
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/import/checkpoint.h"
#include "runtime/base/status.h"
#include "schema/plan_generated.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// Checks that every kiln.weight's sources exist and concatenate (along dim 0) to its shape. A
// tied embedding stored only as "lm_head.weight" (no alias recorded) is rebound to that name.
// Errors are emitted on the weight op and name the weight, the tensor and both shapes.
mlir::LogicalResult bindWeightSources(mlir::ModuleOp module, const Checkpoint &checkpoint);

// `sources` concatenated in order, converted to `dtype` (F32, F16 or BF16). Tensors already in
// `dtype` are copied bit for bit.
Status produceWeightBytes(const Checkpoint &checkpoint, const std::vector<std::string> &sources,
                          schema::DType dtype, std::vector<uint8_t> &bytes);

// `sources` concatenated in order as one matrix quantized as `quant` says, in the artifact's
// layout (runtime/base/quant_layout.h): a source whose checkpoint tensor is stored in exactly
// that form (TensorInfo::packed) is copied, any other is quantized from its fp32 values
// (compiler/import/quantized_matrix.h quantizeMatrix).
Status produceQuantizedWeightBytes(const Checkpoint &checkpoint,
                                   const std::vector<std::string> &sources,
                                   const WeightQuant &quant, std::vector<uint8_t> &bytes);

// The schema dtype of a quantized format: Q8, Q4, Q4M, Q4Z.
schema::DType quantDType(QuantFormat format);

// f32 -> F32, f16 -> F16, bf16 -> BF16.
schema::DType storedDType(mlir::Type type);
schema::DType toSchemaDType(TensorDType dtype);

} // namespace kiln::compiler
