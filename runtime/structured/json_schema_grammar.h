// JSON Schema -> grammar text (the GBNF-style dialect of runtime/structured/grammar.h), for
// structured outputs: `response_format: {"type": "json_schema", ...}` and tool-call arguments.
// The root rule matches the JSON documents that validate against the schema, written compactly:
// at most one space after ':' and ',' (so a sampler cannot spin on whitespace forever), object
// members in the order of "properties", numbers with at most 15 integer and 15 fraction digits.
//
// Supported: type (one or a list), properties, required, additionalProperties, enum, const,
// anyOf, oneOf (taken as anyOf), allOf with one subschema, $ref to "#", "#/$defs/NAME" or
// "#/definitions/NAME" (recursion allowed: each definition is a rule), items, prefixItems,
// minItems, maxItems, minLength, maxLength, format (date-time, date, time, uuid, email, ipv4),
// pattern (runtime/structured/regex_grammar.h's syntax, taken as a full match of the string, not
// JSON Schema's search; not beside minLength, maxLength or format; an error when the pattern's
// strings could hold '"', '\' or a control character), minimum, maximum, exclusiveMinimum and
// exclusiveMaximum on integers (rounded inward; integers keep at most 15 digits either way) and
// minimum 0 on numbers. Annotations (title, description, default, ...) are ignored. Anything else
// is an error that names the schema's JSON pointer and the keyword.
#pragma once

#include "runtime/base/status.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace kiln::structured {

// The grammar text for `schema`. Object members are emitted in the key order of the JSON value:
// nlohmann::json sorts keys, so callers that want the schema's own order (it matters to a model
// that reasons before it answers) parse the request into an ordered_json and use that overload.
Result<std::string> jsonSchemaToGrammar(const nlohmann::json &schema);
Result<std::string> jsonSchemaToGrammar(const nlohmann::ordered_json &schema);

// Any JSON object (`response_format: {"type": "json_object"}`), values any JSON, recursively.
std::string jsonObjectGrammar();

} // namespace kiln::structured
