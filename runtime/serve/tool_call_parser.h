// Tool calls in a model's output text, for the OpenAI chat API's `tool_calls`. The formats:
//   hermes       <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated (Hermes 2
//                Pro, Qwen2.5 / Qwen3). Text before the first call is content.
//   llama3_json  {"name": ..., "parameters": {...}} ("arguments" also read), several joined by
//                ";" (Llama 3.1-3.3 JSON tool calling). Only an output whose first non-blank
//                character is "{" holds calls: the <|python_tag|> that may precede it is a special
//                token the detokenizer skips (the literal text is accepted too).
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral v0.3 tokenizers).
//                [TOOL_CALLS] is a special token too, so the calls are an output starting with
//                "[", or the literal marker after some content. Tokenizers v11 and later (Mistral
//                Small 3.2, Magistral, Devstral) name each call instead:
//                [TOOL_CALLS]name[ARGS]{...arguments...}, repeated, an optional [CALL_ID]id before
//                [ARGS] (read and dropped: the API gives calls its own ids).
//   forced       the JSON array tool_choice "required" constrains the output to
//                (runtime/serve/tool_request.h): [{"name": ..., "parameters": {...}}, ...].
// One incremental parser serves streaming and whole responses, so both say the same: content
// goes out as it is known not to start a call (a partial marker is held back), each call when its
// JSON object closes. Blank text between calls and at the end is dropped; other text after a call
// is content. A call that is not a JSON object with a string "name" and an "arguments" or
// "parameters" value ends parsing: its text and the rest are content. The whole-text form answers
// such an output as vLLM does: all of it content, no calls.
#pragma once

#include "runtime/base/status.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt::serve {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral, kForcedArray };

// "hermes", "llama3_json", "mistral" or "none" (the --tool-call-parser names, as vLLM's).
Result<ToolCallFormat> toolCallFormatNamed(std::string_view name);
const char *toolCallFormatName(ToolCallFormat format);
// The format a chat template's tool calls are written in, from the markers its source holds;
// kNone when it renders none of them.
ToolCallFormat toolCallFormatOfTemplate(std::string_view templateSource);

struct ToolCall {
  std::string name;
  std::string arguments; // JSON text: the arguments object as the model wrote its members
};

// What one piece of output adds: text that is content, and calls completed by it.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  ToolCallDelta feed(std::string_view text);
  // The end of the output: held-back text is content; an unclosed last call whose JSON is
  // complete still counts (a model may stop before </tool_call> or "]").
  ToolCallDelta finish();

  // Some text was taken for a call and was not one.
  bool failed() const { return failed_; }
  size_t callCount() const { return calls_; }

private:
  enum class State {
    kStart,          // before the first non-blank character (llama3_json, mistral, forced)
    kContent,        // content, looking for the format's call marker
    kContentOnly,    // content to the end
    kBeforeCall,     // after a marker or separator: blanks, then "{" (or "[" opening an array)
    kCallName,       // mistral's named call: its name, [CALL_ID]id, up to [ARGS]
    kNamedArguments, // after [ARGS]: blanks, then the arguments object
    kObject,         // inside a call's JSON object (with named_, the arguments themselves)
    kAfterCall,      // after a call: its closing marker, a separator or the end
  };

  void step(ToolCallDelta &out);
  bool stepStart(ToolCallDelta &out);
  bool stepContent(ToolCallDelta &out);
  bool stepBeforeCall(ToolCallDelta &out);
  bool stepCallName(ToolCallDelta &out);
  bool skipBlanks();
  void startObject(bool named);
  bool stepNamedArguments(ToolCallDelta &out);
  bool stepObject(ToolCallDelta &out);
  bool stepAfterCall(ToolCallDelta &out);
  void emitContent(std::string_view text, ToolCallDelta &out);
  void completeObject(std::string_view objectText, ToolCallDelta &out);
  void fail(ToolCallDelta &out);

  ToolCallFormat format_;
  State state_ = State::kStart;
  std::string pending_; // text not yet consumed
  std::string region_;  // raw text of the call being read (marker included), for a failure
  std::string blanks_;  // blank content after a call, said only if other content follows
  bool inArray_ = false;
  bool named_ = false; // the call being read (or last read) is mistral's named form
  std::string name_;   // its name
  // The JSON object scan.
  size_t scanned_ = 0;
  int depth_ = 0;
  bool inString_ = false, escaped_ = false;
  size_t calls_ = 0;
  bool failed_ = false;
};

struct ParsedToolOutput {
  std::optional<std::string> content; // nullopt: calls and nothing else
  std::vector<ToolCall> calls;
};

// A whole output. kNone: all content.
ParsedToolOutput parseToolCalls(ToolCallFormat format, std::string_view text);

} // namespace kiln::rt::serve
