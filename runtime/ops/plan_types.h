// Small facts about plan enums that every layer needs in messages and size computations.
#pragma once

#include "runtime/base/quant_layout.h"
#include "schema/plan_generated.h"

#include <cstddef>
#include <span>
#include <string>

namespace kiln::rt {

// Bytes of one element of `dtype`; 0 for a value outside the enum.
size_t dtypeSize(schema::DType dtype);
// "F32", "BF16", ...; "DType(<n>)" for a value outside the enum.
std::string dtypeName(schema::DType dtype);
bool isFloatDType(schema::DType dtype);
// What a KV cache may hold: F32, F16, BF16 or F8E4M3 (`kiln compile --kv-dtype`).
bool isKvCacheDType(schema::DType dtype);
// Q8, Q4, Q4M, Q4Z: quantized weight matrices (schema/plan.fbs, runtime/base/quant_layout.h), whose
// dtypeSize is 0 (a value has no whole bytes of its own).
bool isQuantDType(schema::DType dtype);
QuantFormat quantFormatOf(schema::DType dtype); // of a quantized dtype
// The bytes a weight of `dtype` and shape [rows, cols] (quantized) or `elements` values
// (otherwise) occupies; "" error text when it is valid, else why not (naming the limit).
struct WeightSize {
  uint64_t bytes = 0;
  std::string error;
};
WeightSize quantWeightSize(schema::DType dtype, uint64_t rows, uint64_t cols, uint64_t groupSize);
// Any weight: elements x dtype size, or a quantized matrix's layout; an error for an unknown
// dtype, a size past 2^64, a group_size on a dtype without groups, or a bad quantized shape.
WeightSize weightSize(schema::DType dtype, std::span<const uint64_t> shape, uint64_t groupSize);
// "F32", or a quantized weight's dtype and group: "Q4M g32" (kiln inspect, the compile log).
std::string weightFormatName(schema::DType dtype, uint64_t groupSize);
// "Embedding", "Linear", ... for an op's params type.
std::string opKindName(schema::OpParams kind);
// "op 'layers.0.attention' (Attention)" for messages.
std::string opLabel(const schema::Op &op);

} // namespace kiln::rt
