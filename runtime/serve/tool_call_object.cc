#include "runtime/serve/tool_call_object.h"

#include <nlohmann/json.hpp>

namespace kiln::rt::serve {
void ToolCallObjectScanner::start(bool named) {
  *this = ToolCallObjectScanner();
  named_ = named;
}

size_t ToolCallObjectScanner::scan(std::string_view text, size_t from) {
  for (size_t at = from; at < text.size(); ++at) {
    const char c = text[at];
    if (depth_ == 0) { // the opening brace
      depth_ = 1;
      expect_ = Expect::kKey;
      if (named_) { // the whole object is the arguments
        expect_ = Expect::kNested;
        streamingValue_ = argumentsObject_ = true;
        arguments_ += c;
      }
      continue;
    }
    switch (expect_) {
    case Expect::kKey:
      if (c == '"') {
        key_.clear();
        expect_ = Expect::kKeyString;
      } else if (c == '}') {
        return at + 1;
      }
      break; // blanks and ','; anything else the parse refuses
    case Expect::kKeyString:
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"') {
        expect_ = Expect::kColon;
        break;
      }
      key_ += c;
      break;
    case Expect::kColon:
      if (c == ':')
        expect_ = Expect::kValue;
      break;
    case Expect::kValue: {
      if (isJsonBlank(c))
        break;
      valueStart_ = at;
      const bool arguments = !argumentsSeen_ && (key_ == "arguments" || key_ == "parameters");
      argumentsSeen_ = argumentsSeen_ || arguments;
      if (c == '"') {
        expect_ = Expect::kStringValue;
      } else if (c == '{' || c == '[') {
        expect_ = Expect::kNested;
        depth_ = 2;
        streamingValue_ = arguments && c == '{';
        argumentsObject_ = argumentsObject_ || streamingValue_;
        if (streamingValue_)
          arguments_ += c;
      } else {
        expect_ = Expect::kScalar;
      }
      break;
    }
    case Expect::kStringValue:
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        endValue(text, at + 1);
      break;
    case Expect::kScalar:
      if (c == ',' || c == '}')
        endValue(text, at);
      if (c == '}')
        return at + 1;
      break;
    case Expect::kNested:
      scanNested(c);
      if (named_ && depth_ == 0) {
        argumentsClosed_ = true;
        return at + 1;
      }
      if (!named_ && depth_ == 1) {
        argumentsClosed_ = argumentsClosed_ || streamingValue_;
        streamingValue_ = false;
        expect_ = Expect::kKey;
      }
      break;
    }
  }
  return std::string::npos;
}

void ToolCallObjectScanner::scanNested(char c) {
  const bool blankOutside = !inString_ && isJsonBlank(c);
  if (inString_) {
    if (escaped_)
      escaped_ = false;
    else if (c == '\\')
      escaped_ = true;
    else if (c == '"')
      inString_ = false;
  } else if (c == '"') {
    inString_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    --depth_;
  }
  if (streamingValue_ && !blankOutside)
    arguments_ += c;
}

// A top-level value ended at `end`: the first "name" member's string is the call's name.
void ToolCallObjectScanner::endValue(std::string_view text, size_t end) {
  expect_ = Expect::kKey;
  if (key_ != "name" || name_ || text[valueStart_] != '"')
    return;
  auto value = nlohmann::json::parse(text.substr(valueStart_, end - valueStart_), nullptr,
                                     /*allow_exceptions=*/false);
  if (value.is_string())
    name_ = value.get<std::string>();
}

} // namespace kiln::rt::serve
