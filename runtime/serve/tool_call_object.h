// Reads one tool call's JSON object as the model writes it, a piece at a time, for
// runtime/serve/tool_call_parser.h: where the object closes, the call's name as soon as its string
// has closed, and the arguments as they come, so a stream can send them piecewise as OpenAI and
// vLLM do.
//
// A call is {"name": "...", "arguments": {...}} ("parameters" too; the first of the two members the
// object has is the arguments), its top-level members in any order; or, for mistral's named calls,
// the arguments object itself. The arguments are sent as the model wrote them less the blanks
// outside strings (compact JSON that parses to the same value): that text grows with each piece and
// never changes what it has said, and the whole call's arguments are that same text (so the
// streamed pieces add up to the call the whole response gives). Arguments given as a JSON string
// or any other non-object value are known only when the object closes.
//
// The scan checks only the nesting; the parser parses the closed object to accept the call.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::rt::serve {

// JSON's insignificant whitespace, which the tool-call parser also skips between calls.
inline bool isJsonBlank(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

class ToolCallObjectScanner {
public:
  // A new object starting at the '{' that scan() is next given. `named`: that object is the
  // arguments (mistral's named call, whose name the parser read before it).
  void start(bool named);

  // Scans text[from, text.size()) (text starts at the object's '{' and only grows between calls);
  // returns the offset one past the object's closing brace once seen, else std::string::npos.
  size_t scan(std::string_view text, size_t from);

  // The name member's string value, decoded, once it has closed; nullopt before (and always for
  // a named call: the parser has its name).
  const std::optional<std::string> &name() const { return name_; }
  // Whether the arguments are an object that has begun: arguments() is then its compact text so
  // far (whole once argumentsClosed()).
  bool argumentsStreaming() const { return argumentsObject_; }
  bool argumentsClosed() const { return argumentsClosed_; }
  const std::string &arguments() const { return arguments_; }

private:
  enum class Expect {
    kKey,         // at the top level: a member's key, a ',' or the closing '}'
    kKeyString,   // inside a key
    kColon,       // after a key
    kValue,       // after the ':'
    kStringValue, // inside a top-level string value
    kScalar,      // a number or literal, up to the next ',' or '}'
    kNested,      // inside an object or array value (depth_ > 1)
  };

  // A character inside a nested value: the nesting, and the arguments' compact text.
  void scanNested(char c);
  void endValue(std::string_view text, size_t end);

  bool named_ = false;
  Expect expect_ = Expect::kKey;
  int depth_ = 0;
  bool inString_ = false, escaped_ = false;
  std::string key_;             // the member's key (raw: the keys looked for hold no escapes)
  size_t valueStart_ = 0;       // where the member's value starts in text
  bool streamingValue_ = false; // the nested value being read is the arguments object
  std::optional<std::string> name_;
  bool argumentsSeen_ = false; // a member named arguments / parameters has begun
  bool argumentsObject_ = false, argumentsClosed_ = false;
  std::string arguments_;
};

} // namespace kiln::rt::serve
