// Small facts about plan enums that every layer needs in messages and size computations.
#pragma once

#include "schema/plan_generated.h"

#include <cstddef>
#include <string>

namespace kiln::rt {

// Bytes of one element of `dtype`; 0 for a value outside the enum.
size_t dtypeSize(schema::DType dtype);
// "F32", "BF16", ...; "DType(<n>)" for a value outside the enum.
std::string dtypeName(schema::DType dtype);
bool isFloatDType(schema::DType dtype);
// "Embedding", "Linear", ... for an op's params type.
std::string opKindName(schema::OpParams kind);
// "op 'layers.0.attention' (Attention)" for messages.
std::string opLabel(const schema::Op &op);

} // namespace kiln::rt
