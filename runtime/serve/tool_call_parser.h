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
//
// A stream sends calls piecewise (ToolCallDelta::fragments): a call's name once its string has
// closed, then its arguments as the model writes them (runtime/serve/tool_call_object.h), so a
// client sees a long call grow as it does from OpenAI and vLLM. What has gone out cannot be taken
// back: a call whose object turns out malformed after its name was sent stays in the stream as
// sent (its text is not also said as content), and the rest of the output is content.
#pragma once

#include "runtime/base/status.h"
#include "runtime/serve/tool_call_object.h"

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
  // JSON text: the arguments object as the model wrote it less the blanks outside strings
  // (tool_call_object.h); arguments given as a string are that string.
  std::string arguments;
};

// A piece of one call as it streams. A call's fragments, in order, add up to it: the first has its
// name, and their arguments joined are the call's arguments.
struct ToolCallFragment {
  size_t call = 0;       // the call's index among the output's calls (0 for the first)
  bool opens = false;    // the call's first fragment, which has its name
  std::string name;      // the call's name on its first fragment; empty on the others
  std::string arguments; // more of the arguments text
};

// What one piece of output adds: text that is content, calls completed by it, and what it says of
// calls as they stream.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<ToolCallFragment> fragments;
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
  // Sends what the object scan knows of the call that has not gone out yet.
  void streamCall(ToolCallDelta &out);
  void addFragment(std::string name, std::string_view arguments, ToolCallDelta &out);
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
  ToolCallObjectScanner object_;
  bool announced_ = false;   // the call's name has gone out in a fragment
  size_t sentArguments_ = 0; // bytes of its arguments that have
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
