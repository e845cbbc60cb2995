// The bodies of JSON schema number and integer types with their bounds (minimum, maximum,
// exclusiveMinimum, exclusiveMaximum) for runtime/structured/json_schema_grammar.cc. Internal to
// runtime/structured.
#pragma once

#include "runtime/base/status.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kiln::structured::json_schema_internal {

// Numbers within the bounds, any decimal values: written without an exponent, at most 15 integer
// and 15 fraction digits like every number here (decimalRange); minimum 0 alone keeps the
// exponent ("nonneg-number"), no bound is "number". multipleOf is an error naming it.
Result<std::string> numberBody(const nlohmann::ordered_json &schema, const std::string &path);

// The integers within the tightest lower and upper bound (fractional ones rounded inward), each
// side within 15 digits; multipleOf is an error naming it.
Result<std::string> integerBody(const nlohmann::ordered_json &schema, const std::string &path);

} // namespace kiln::structured::json_schema_internal
