// OpenAI tool calling on /v1/chat/completions: the request's `tools`, `tool_choice` and
// `parallel_tool_calls`, and the `tool_calls` of earlier assistant turns.
//   tools                [{"type": "function", "function": {"name", "description"?,
//                        "parameters"?: a JSON schema}}]; rendered by the chat template.
//   tool_choice          "auto" (the default with tools: the output is parsed for calls in the
//                        model's format, runtime/serve/tool_call_parser.h), "none" (not parsed),
//                        "required" (the output is constrained to a JSON array of one or more
//                        {"name", "parameters"} calls of the given tools, as vLLM does), or
//                        {"type": "function", "function": {"name": N}} (constrained to N's
//                        arguments: the whole output is the one call's arguments).
//   parallel_tool_calls  false: at most one call (the grammar's limit for "required"; "auto"
//                        keeps the first).
// A forced choice compiles into GenerationRequest::grammar, so it cannot be combined with
// response_format or the guided_* fields.
#pragma once

#include "runtime/serve/generation_request.h"
#include "runtime/serve/json_fields.h"
#include "runtime/serve/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kiln::rt::serve {

// Reads the fields of a chat body (`f`; `ordered` is the same body in the client's key order)
// into out.tools, rendering `tools` into the template variables and compiling a forced choice.
void readTools(JsonFields &f, const nlohmann::ordered_json &ordered, GenerationRequest &out);

// OpenAI sends an assistant turn's tool_calls[i].function.arguments as JSON text; chat templates
// write it as an object (vLLM converts it likewise). Text that is not a JSON object stays text.
void toolArgumentsAsObjects(nlohmann::ordered_json &messages);

// A fresh tool call id: "call_" and 24 letters or digits; Mistral's templates accept only 9
// letters or digits.
std::string newToolCallId(ToolCallFormat format);

// How a sample's text is read for this request: kNone when it is plain content.
ToolCallFormat toolCallFormatFor(const ToolSettings &tools, ToolCallFormat modelFormat);

} // namespace kiln::rt::serve
