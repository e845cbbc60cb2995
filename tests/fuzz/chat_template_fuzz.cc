// Chat templates (kiln's Jinja subset): ChatTemplate::parse on hostile template text, then
// renderChat with a conversation that exercises roles, tool calls and tools.
//
// Input: template [sep messages JSON] (fuzz_util.h); when the second part is a JSON array it
// replaces the fixed conversation. Rendering is deterministic with the clock fixed: a second
// render of the same input gives the same text or the same error.
#include "runtime/text/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

#include <nlohmann/json.hpp>

#include <string>

namespace {

using nlohmann::ordered_json;

const ordered_json &fixedMessages() {
  static const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris? {{ not a tag }}"},
    {"role": "assistant", "content": null, "reasoning_content": "Look it up.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "22 C"},
    {"role": "user", "content": [{"type": "text", "text": "And \u00e9t\u00e9?"}]}
  ])");
  return messages;
}

const ordered_json &fixedExtra() {
  static const ordered_json extra = ordered_json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "weather", "description": "Forecast",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "date_string": "26 Sep 2024", "enable_thinking": true
  })");
  return extra;
}

std::tm fixedNow() {
  std::tm now{};
  now.tm_year = 124, now.tm_mon = 8, now.tm_mday = 26, now.tm_hour = 10, now.tm_min = 30;
  return now;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::vector<std::string_view> files = kiln::fuzz::splitFiles(data, size);
  auto parsed = kiln::rt::ChatTemplate::parse(std::string(files[0]));
  if (!parsed.isOk()) {
    KILN_FUZZ_CHECK(!parsed.status().message().empty(), "a parse error without a message");
    return 0;
  }
  kiln::rt::ChatTemplate chatTemplate = std::move(parsed).value();
  chatTemplate.setClock(fixedNow);
  // A step costs ~75 us under ASan + UBSan: a runaway template fails in ~1.5 s, not minutes.
  chatTemplate.setStepLimit(20000);
  // repr of a string costs ~100 ns a byte here: a template printing its own results as tuples
  // fails after 4 MiB written, not after minutes (docs/reliability.md, fix #11).
  chatTemplate.setWrittenByteLimit(size_t{4} << 20);
  ordered_json messages = fixedMessages();
  if (files.size() > 1) {
    ordered_json given = ordered_json::parse(files[1], nullptr, /*allow_exceptions=*/false);
    if (given.is_array())
      messages = std::move(given);
  }
  const kiln::rt::ChatSpecialTokens tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  const bool addGenerationPrompt = size % 2 == 0;
  auto first = chatTemplate.renderChat(messages, addGenerationPrompt, tokens, fixedExtra());
  auto second = chatTemplate.renderChat(messages, addGenerationPrompt, tokens, fixedExtra());
  KILN_FUZZ_CHECK(first.isOk() == second.isOk(), "a second render succeeded or failed differently");
  if (first.isOk())
    KILN_FUZZ_CHECK(*first == *second, "two renders of one input differ");
  else
    KILN_FUZZ_CHECK(first.status().message() == second.status().message(),
                    "two renders failed with different errors");
  return 0;
}
