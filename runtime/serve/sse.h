// Stream framing: server-sent events (OpenAI: "data: {json}\n\n" ending with "data: [DONE]"; TGI:
// "data:{json}\n\n") and JSON lines (SageMaker LMI: "{json}\n"). Plus a strict parser of those
// framings, used by tests and the benchmark client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt::serve {

enum class Framing { kSse, kJsonLines };

// One event or line. `payload` must not contain a newline (compact JSON never does).
std::string frameEvent(Framing framing, std::string_view payload);
// "data: [DONE]\n\n" for SSE; "" for JSON lines, which end with the stream.
std::string doneMarker(Framing framing);

// Splits an SSE body into the payloads of its "data:" fields, one per event. Fails (returns
// false, with `error` saying where) on a line that is not a data field or comment, or a body that
// does not end with a blank line.
bool parseSseEvents(std::string_view body, std::vector<std::string> &payloads, std::string &error);
// Splits JSON lines; fails on an empty line or a body not ending in "\n".
bool parseJsonLines(std::string_view body, std::vector<std::string> &lines, std::string &error);

} // namespace kiln::rt::serve
