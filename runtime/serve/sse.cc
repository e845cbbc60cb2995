#include "runtime/serve/sse.h"

namespace kiln::rt::serve {

std::string frameEvent(Framing framing, std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  if (framing == Framing::kSse) {
    out += "data: ";
    out += payload;
    out += "\n\n";
  } else {
    out += payload;
    out += "\n";
  }
  return out;
}

std::string doneMarker(Framing framing) {
  return framing == Framing::kSse ? "data: [DONE]\n\n" : "";
}

bool parseSseEvents(std::string_view body, std::vector<std::string> &payloads,
                    std::string &error) {
  payloads.clear();
  std::string data;
  bool inEvent = false;
  size_t pos = 0, lineNo = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) {
      error = "line " + std::to_string(lineNo + 1) + " does not end with a newline";
      return false;
    }
    std::string_view line = body.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    ++lineNo;
    pos = end + 1;
    if (line.empty()) {
      if (inEvent)
        payloads.push_back(data);
      data.clear();
      inEvent = false;
    } else if (line.front() == ':') {
      continue; // a comment (keep-alive)
    } else if (line.substr(0, 5) == "data:") {
      std::string_view value = line.substr(5);
      if (!value.empty() && value.front() == ' ')
        value.remove_prefix(1);
      if (inEvent)
        data += "\n";
      data += value;
      inEvent = true;
    } else {
      error = "line " + std::to_string(lineNo) + " is not an SSE data field: " + std::string(line);
      return false;
    }
  }
  if (inEvent) {
    error = "the last event is not terminated by a blank line";
    return false;
  }
  return true;
}

bool parseJsonLines(std::string_view body, std::vector<std::string> &lines, std::string &error) {
  lines.clear();
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) {
      error = "line " + std::to_string(lines.size() + 1) + " does not end with a newline";
      return false;
    }
    if (end == pos) {
      error = "line " + std::to_string(lines.size() + 1) + " is empty";
      return false;
    }
    lines.emplace_back(body.substr(pos, end - pos));
    pos = end + 1;
  }
  return true;
}

} // namespace kiln::rt::serve
