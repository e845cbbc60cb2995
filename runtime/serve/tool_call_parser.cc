#include "runtime/serve/tool_call_parser.h"

#include "runtime/serve/json_text.h"
#include "runtime/text/tokenizer_utf8.h"

#include <nlohmann/json.hpp>

namespace kiln::rt::serve {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool allBlank(std::string_view text) {
  for (char c : text)
    if (!isJsonBlank(c))
      return false;
  return true;
}

size_t firstNonBlank(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && isJsonBlank(text[i]))
    ++i;
  return i;
}

// Whether `text` is a proper prefix of `marker` (more text could complete it).
bool startsMarker(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t heldBack(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (marker.substr(0, n) == text.substr(text.size() - n))
      return n;
  return 0;
}

// The format's marker in the middle of content: none for llama3_json and the forced array.
std::string_view contentMarker(ToolCallFormat format) {
  if (format == ToolCallFormat::kHermes)
    return kHermesOpen;
  if (format == ToolCallFormat::kMistral)
    return kMistralMarker;
  return {};
}

// A closed {"name", "arguments"} object as a call: its name and arguments as the scan read them
// (the first "name" member; the first "arguments" or "parameters" one: tool_call_object.h).
std::optional<ToolCall> callOf(const nlohmann::ordered_json &object,
                               const ToolCallObjectScanner &scan) {
  if (!object.is_object() || !scan.name())
    return std::nullopt;
  for (const auto &[key, value] : object.items()) {
    if (key != "arguments" && key != "parameters")
      continue;
    if (scan.argumentsStreaming())
      return ToolCall{*scan.name(), scan.arguments()};
    return ToolCall{*scan.name(), value.is_string() ? value.get<std::string>() : dumpJson(value)};
  }
  return std::nullopt;
}

// A function name as Mistral's named calls write it before [ARGS] (or [CALL_ID]).
bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// The length of `text` less an incomplete UTF-8 sequence at its end, which the next piece may
// finish: a fragment never splits a character (each goes out as JSON text of its own).
size_t wholeUtf8Length(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<uint8_t>(text[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation byte: look further back for the lead
    return utf8::seqLength(c) > back ? n - back : n;
  }
  return n;
}

} // namespace

Result<ToolCallFormat> toolCallFormatNamed(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                           ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral})
    if (name == toolCallFormatName(f))
      return f;
  return invalidArgument("tool call parser '" + std::string(name) +
                         "' is not one of hermes, llama3_json, mistral, none");
}

const char *toolCallFormatName(ToolCallFormat format) {
  switch (format) {
  case ToolCallFormat::kNone:
    return "none";
  case ToolCallFormat::kHermes:
    return "hermes";
  case ToolCallFormat::kLlama3Json:
    return "llama3_json";
  case ToolCallFormat::kMistral:
    return "mistral";
  case ToolCallFormat::kForcedArray:
    return "forced";
  }
  return "none";
}

ToolCallFormat toolCallFormatOfTemplate(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos)
    return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos)
    return ToolCallFormat::kMistral;
  // Llama 3.1-3.3 templates: the JSON calling convention next to the <|python_tag|> one.
  if (source.find(kPythonTag) != std::string_view::npos ||
      (source.find("<|start_header_id|>") != std::string_view::npos &&
       source.find("tool_calls") != std::string_view::npos))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ToolCallDelta ToolCallParser::feed(std::string_view text) {
  ToolCallDelta out;
  pending_.append(text);
  step(out);
  return out;
}

void ToolCallParser::step(ToolCallDelta &out) {
  for (bool progress = true; progress && !pending_.empty();) {
    switch (state_) {
    case State::kStart:
      progress = stepStart(out);
      break;
    case State::kContent:
      progress = stepContent(out);
      break;
    case State::kContentOnly:
      emitContent(pending_, out);
      pending_.clear();
      progress = false;
      break;
    case State::kBeforeCall:
      progress = stepBeforeCall(out);
      break;
    case State::kCallName:
      progress = stepCallName(out);
      break;
    case State::kNamedArguments:
      progress = stepNamedArguments(out);
      break;
    case State::kObject:
      progress = stepObject(out);
      break;
    case State::kAfterCall:
      progress = stepAfterCall(out);
      break;
    }
  }
}

bool ToolCallParser::stepStart(ToolCallDelta &) {
  if (format_ == ToolCallFormat::kHermes || format_ == ToolCallFormat::kNone) {
    state_ = format_ == ToolCallFormat::kNone ? State::kContentOnly : State::kContent;
    return true;
  }
  size_t at = firstNonBlank(pending_);
  if (at == pending_.size())
    return false;
  std::string_view rest = std::string_view(pending_).substr(at);
  std::string_view marker = format_ == ToolCallFormat::kLlama3Json ? kPythonTag : kMistralMarker;
  if (format_ != ToolCallFormat::kForcedArray && startsMarker(rest, marker))
    return false;
  if (format_ != ToolCallFormat::kForcedArray && rest.substr(0, marker.size()) == marker) {
    region_ = pending_.substr(0, at + marker.size());
    pending_.erase(0, at + marker.size());
    state_ = State::kBeforeCall;
    return true;
  }
  char opens = format_ == ToolCallFormat::kLlama3Json ? '{' : '[';
  if (rest[0] == opens) {
    state_ = State::kBeforeCall;
    return true;
  }
  // Not a call: llama3_json has no marker to look for later; mistral's may follow content.
  state_ = format_ == ToolCallFormat::kMistral ? State::kContent : State::kContentOnly;
  return true;
}

bool ToolCallParser::stepContent(ToolCallDelta &out) {
  std::string_view marker = contentMarker(format_);
  if (marker.empty()) {
    state_ = State::kContentOnly;
    return true;
  }
  size_t at = pending_.find(marker);
  if (at == std::string::npos) {
    size_t keep = heldBack(pending_, marker);
    emitContent(std::string_view(pending_).substr(0, pending_.size() - keep), out);
    pending_.erase(0, pending_.size() - keep);
    return false;
  }
  emitContent(std::string_view(pending_).substr(0, at), out);
  region_ = std::string(marker);
  pending_.erase(0, at + marker.size());
  inArray_ = false;
  state_ = State::kBeforeCall;
  return true;
}

// Moves leading blanks from pending_ into the call's region; whether text follows them.
bool ToolCallParser::skipBlanks() {
  size_t at = firstNonBlank(pending_);
  region_.append(pending_, 0, at);
  pending_.erase(0, at);
  return !pending_.empty();
}

// A call's JSON object starts at pending_[0]: a {"name", "arguments"} object, or with `named`
// mistral's arguments object.
void ToolCallParser::startObject(bool named) {
  named_ = named;
  state_ = State::kObject;
  scanned_ = 0;
  object_.start(named);
  announced_ = false;
  sentArguments_ = 0;
}

bool ToolCallParser::stepBeforeCall(ToolCallDelta &out) {
  if (!skipBlanks())
    return false;
  bool arrays = format_ == ToolCallFormat::kMistral || format_ == ToolCallFormat::kForcedArray;
  if (arrays && !inArray_ && pending_[0] == '[') {
    region_ += '[';
    pending_.erase(0, 1);
    inArray_ = true;
    return true;
  }
  if (format_ == ToolCallFormat::kMistral && !inArray_ && isNameChar(pending_[0])) {
    state_ = State::kCallName; // tokenizer v11 and later: [TOOL_CALLS]name[ARGS]{...}
    return true;
  }
  if (pending_[0] != '{') {
    fail(out);
    return true;
  }
  startObject(false);
  return true;
}

// After [ARGS]: the arguments object must follow (blanks allowed before it).
bool ToolCallParser::stepNamedArguments(ToolCallDelta &out) {
  if (!skipBlanks())
    return false;
  if (pending_[0] != '{') {
    fail(out);
    return true;
  }
  startObject(true);
  return true;
}

// Mistral's named call: the name, optionally [CALL_ID] and an id, then [ARGS] and the arguments
// object. Waits while the text could still become that; anything else is a failed call.
bool ToolCallParser::stepCallName(ToolCallDelta &out) {
  size_t end = 0;
  while (end < pending_.size() && isNameChar(pending_[end]))
    ++end;
  std::string_view rest = std::string_view(pending_).substr(end);
  if (rest.empty() || startsMarker(rest, kMistralArgs) || startsMarker(rest, kMistralCallId))
    return false;
  size_t argsAt = std::string_view::npos;
  if (rest.substr(0, kMistralArgs.size()) == kMistralArgs) {
    argsAt = end;
  } else if (rest.substr(0, kMistralCallId.size()) == kMistralCallId) {
    size_t idEnd = end + kMistralCallId.size();
    while (idEnd < pending_.size() && isNameChar(pending_[idEnd]))
      ++idEnd;
    std::string_view after = std::string_view(pending_).substr(idEnd);
    if (after.empty() || startsMarker(after, kMistralArgs))
      return false;
    if (after.substr(0, kMistralArgs.size()) == kMistralArgs)
      argsAt = idEnd;
  }
  if (argsAt == std::string_view::npos) {
    fail(out);
    return true;
  }
  name_ = pending_.substr(0, end);
  region_.append(pending_, 0, argsAt + kMistralArgs.size());
  pending_.erase(0, argsAt + kMistralArgs.size());
  state_ = State::kNamedArguments;
  return true;
}

bool ToolCallParser::stepObject(ToolCallDelta &out) {
  const size_t end = object_.scan(pending_, scanned_);
  scanned_ = end == std::string::npos ? pending_.size() : end;
  streamCall(out);
  if (end == std::string::npos)
    return false;
  std::string object = pending_.substr(0, end);
  pending_.erase(0, end);
  completeObject(object, out);
  return true;
}

void ToolCallParser::addFragment(std::string name, std::string_view arguments, ToolCallDelta &out) {
  if (out.fragments.empty() || out.fragments.back().call != calls_)
    out.fragments.push_back({calls_, !announced_, std::move(name), {}});
  out.fragments.back().arguments.append(arguments);
  sentArguments_ += arguments.size();
}

void ToolCallParser::streamCall(ToolCallDelta &out) {
  if (!announced_ && (named_ || object_.name())) {
    addFragment(named_ ? name_ : *object_.name(), {}, out);
    announced_ = true;
  }
  const size_t known = wholeUtf8Length(object_.arguments());
  if (announced_ && object_.argumentsStreaming() && known > sentArguments_)
    addFragment(
        {}, std::string_view(object_.arguments()).substr(sentArguments_, known - sentArguments_),
        out);
}

void ToolCallParser::completeObject(std::string_view objectText, ToolCallDelta &out) {
  auto object = nlohmann::ordered_json::parse(objectText, nullptr, /*allow_exceptions=*/false);
  std::optional<ToolCall> call = !named_ ? callOf(object, object_)
                                 : object.is_object()
                                     ? std::optional<ToolCall>(ToolCall{name_, object_.arguments()})
                                     : std::nullopt;
  if (!call) {
    region_.append(objectText);
    return fail(out);
  }
  // The rest of the call: all of it when the arguments were not an object streamed as it came.
  if (!announced_) {
    addFragment(call->name, call->arguments, out);
    announced_ = true;
  } else if (call->arguments.size() > sentArguments_)
    addFragment({}, std::string_view(call->arguments).substr(sentArguments_), out);
  out.calls.push_back(std::move(*call));
  ++calls_;
  region_.clear();
  state_ = State::kAfterCall;
}

// Blanks before other text stay in pending_: content then says them (emitContent).
bool ToolCallParser::stepAfterCall(ToolCallDelta &) {
  size_t at = firstNonBlank(pending_);
  if (at == pending_.size())
    return false;
  std::string_view rest = std::string_view(pending_).substr(at);
  if (format_ == ToolCallFormat::kHermes) {
    if (startsMarker(rest, kHermesClose))
      return false;
    if (rest.substr(0, kHermesClose.size()) == kHermesClose)
      pending_.erase(0, at + kHermesClose.size());
    state_ = State::kContent;
    return true;
  }
  if (named_) { // another [TOOL_CALLS]name[ARGS]{...}, or content
    state_ = State::kContent;
    return true;
  }
  char separator = format_ == ToolCallFormat::kLlama3Json ? ';' : ',';
  if (rest[0] == separator) {
    region_ = std::string(1, separator);
    pending_.erase(0, at + 1);
    state_ = State::kBeforeCall;
    return true;
  }
  if (inArray_ && rest[0] == ']') {
    pending_.erase(0, at + 1);
    inArray_ = false;
    state_ = format_ == ToolCallFormat::kMistral ? State::kContent : State::kContentOnly;
    return true;
  }
  state_ = State::kContentOnly;
  return true;
}

// After a call, trailing blanks wait for more content: the output's last blanks are dropped
// however the text was cut into pieces.
void ToolCallParser::emitContent(std::string_view text, ToolCallDelta &out) {
  if (calls_ == 0) {
    out.content.append(text);
    return;
  }
  size_t end = text.size();
  while (end > 0 && isJsonBlank(text[end - 1]))
    --end;
  if (end > 0) {
    out.content += blanks_;
    out.content.append(text.substr(0, end));
    blanks_.clear();
  }
  blanks_.append(text.substr(end));
}

// A call whose name went out stays as sent: its text is not said again as content.
void ToolCallParser::fail(ToolCallDelta &out) {
  failed_ = true;
  const bool sent = state_ == State::kObject && announced_;
  std::string raw = std::move(region_);
  region_.clear();
  state_ = State::kContentOnly;
  if (!sent)
    emitContent(raw, out);
}

ToolCallDelta ToolCallParser::finish() {
  ToolCallDelta out;
  switch (state_) {
  case State::kBeforeCall:
    if (!allBlank(region_ + pending_) && !(calls_ > 0 && allBlank(pending_)))
      fail(out);
    else
      pending_.clear();
    break;
  case State::kCallName:
  case State::kNamedArguments:
  case State::kObject:
    region_ += pending_;
    pending_.clear();
    fail(out);
    break;
  case State::kAfterCall:
    pending_.clear(); // blanks or a partial closing marker
    break;
  default:
    break;
  }
  emitContent(pending_, out);
  pending_.clear();
  return out;
}

ParsedToolOutput parseToolCalls(ToolCallFormat format, std::string_view text) {
  ParsedToolOutput parsed;
  if (format == ToolCallFormat::kNone) {
    parsed.content = std::string(text);
    return parsed;
  }
  ToolCallParser parser(format);
  ToolCallDelta first = parser.feed(text);
  ToolCallDelta last = parser.finish();
  if (parser.failed() || parser.callCount() == 0) {
    parsed.content = std::string(text);
    return parsed;
  }
  std::string content = first.content + last.content;
  if (!content.empty())
    parsed.content = std::move(content);
  parsed.calls = std::move(first.calls);
  for (ToolCall &call : last.calls)
    parsed.calls.push_back(std::move(call));
  return parsed;
}

} // namespace kiln::rt::serve
