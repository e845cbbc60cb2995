// The structured-output fields of a request, whichever API it came through, compiled into the
// grammar the engine constrains every sample with (runtime/structured; GenerationRequest::
// grammar). At most one may be given:
//   OpenAI     response_format {"type": "text" | "json_object" | "json_schema",
//              "json_schema": {"name", "schema", "strict"}}
//   vLLM       guided_json (a schema, or its JSON text), guided_regex, guided_choice (strings),
//              guided_grammar (kiln's grammar text, runtime/structured/grammar.h), or the same
//              as structured_outputs {"json" | "regex" | "choice" | "grammar": ...}
//   TGI        parameters.grammar {"type": "json" | "regex", "value": ...}
// Errors name the field (and for a schema, the keyword kiln cannot compile).
#pragma once

#include "runtime/serve/generation_request.h"
#include "runtime/serve/json_fields.h"

#include <nlohmann/json.hpp>

namespace kiln::rt::serve {

// Whether `f` (a chat or completions body) has a structured-output field: callers parse the
// client-ordered body only then.
bool hasStructuredOutput(const JsonFields &f);
// The first structured-output field `f` has ("response_format", "guided_json", ...), or null.
const char *structuredOutputField(const JsonFields &f);
// The OpenAI and vLLM fields of `f` (a chat or completions body). `ordered` is the body with the
// client's key order (a schema's properties are generated in that order), or null.
void readStructuredOutput(JsonFields &f, const nlohmann::ordered_json *ordered,
                          GenerationRequest &out);
// TGI's `grammar` in `parameters` (`p` prefixes its errors with "parameters."); `ordered` is the
// parameters object with the client's key order, or null.
void readTgiGrammar(JsonFields &p, const nlohmann::ordered_json *ordered, GenerationRequest &out);

} // namespace kiln::rt::serve
