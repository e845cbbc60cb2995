// The tool-call parser (runtime/serve/tool_call_parser.h) over model output it cannot trust: the
// first byte picks the format ('h' hermes, 'l' llama3_json, 'm' mistral, anything else the forced
// array), the second the size of the pieces a stream feeds (1-16 bytes), the rest is the output.
//
// Invariants: fed whole or in pieces, the parser says the same calls and content, streams the same
// fragments of calls, and fails alike; each completed call is exactly its fragments joined (the
// first naming it); the whole-text answer is either exactly the streamed one (calls found, none
// failed) or all of the text as content with no call.
#include "runtime/serve/tool_call_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace kiln::rt::serve;

ToolCallFormat formatOf(char c) {
  switch (c) {
  case 'h':
    return ToolCallFormat::kHermes;
  case 'l':
    return ToolCallFormat::kLlama3Json;
  case 'm':
    return ToolCallFormat::kMistral;
  default:
    return ToolCallFormat::kForcedArray;
  }
}

// all.fragments holds one fragment per call: the pieces joined (a later piece naming the call
// again would show as a second name).
void append(ToolCallDelta &all, ToolCallDelta piece) {
  all.content += piece.content;
  for (ToolCall &call : piece.calls)
    all.calls.push_back(std::move(call));
  for (ToolCallFragment &f : piece.fragments) {
    if (all.fragments.size() <= f.call)
      all.fragments.resize(f.call + 1);
    all.fragments[f.call].call = f.call;
    all.fragments[f.call].opens = all.fragments[f.call].opens || f.opens;
    all.fragments[f.call].name += f.name;
    all.fragments[f.call].arguments += f.arguments;
  }
}

// Each completed call is its fragments joined; at most one call more (its object cut off or
// malformed after its name went out) has fragments.
bool callsAreTheirFragments(const ToolCallDelta &all) {
  if (all.fragments.size() < all.calls.size() || all.fragments.size() > all.calls.size() + 1)
    return false;
  for (size_t i = 0; i < all.calls.size(); ++i)
    if (!all.fragments[i].opens || all.fragments[i].name != all.calls[i].name ||
        all.fragments[i].arguments != all.calls[i].arguments)
      return false;
  return true;
}

// The same length and, item by item, the same name and arguments: calls, or fragments joined.
template <class T> bool sameNamesAndArguments(const std::vector<T> &a, const std::vector<T> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].arguments != b[i].arguments)
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 8192)
    return 0;
  const ToolCallFormat format = formatOf(static_cast<char>(data[0]));
  const size_t step = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char *>(data) + 2, size - 2);

  ToolCallParser whole(format), pieces(format);
  ToolCallDelta once = whole.feed(text);
  append(once, whole.finish());
  ToolCallDelta streamed;
  for (size_t at = 0; at < text.size(); at += step)
    append(streamed, pieces.feed(text.substr(at, step)));
  append(streamed, pieces.finish());
  KILN_FUZZ_CHECK(sameNamesAndArguments(once.calls, streamed.calls) &&
                      once.content == streamed.content,
                  "the parser fed in pieces of " + std::to_string(step) + " says otherwise");
  KILN_FUZZ_CHECK(whole.failed() == pieces.failed(), "failure depends on the pieces");
  KILN_FUZZ_CHECK(sameNamesAndArguments(once.fragments, streamed.fragments),
                  "the fragments fed in pieces of " + std::to_string(step) + " differ");
  KILN_FUZZ_CHECK(callsAreTheirFragments(once), "a call is not its fragments joined");

  ParsedToolOutput parsed = parseToolCalls(format, text);
  if (whole.failed() || whole.callCount() == 0) {
    KILN_FUZZ_CHECK(parsed.calls.empty() && parsed.content == std::string(text),
                    "an output without calls is not all content");
    return 0;
  }
  KILN_FUZZ_CHECK(sameNamesAndArguments(parsed.calls, once.calls) &&
                      parsed.content.value_or("") == once.content,
                  "the whole-text answer differs from the parser's");
  return 0;
}
