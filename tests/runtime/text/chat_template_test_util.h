// Shared by the chat-template tests: the clock the goldens were rendered with
// (tools/goldens/make_chat_template_goldens.py's FIXED_NOW).
#pragma once

#include <ctime>

namespace kiln::rt::testing {

// Thursday 2024-09-26 10:30:00.
inline std::tm goldenFixedNow() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 8;
  t.tm_mday = 26;
  t.tm_hour = 10;
  t.tm_min = 30;
  t.tm_wday = 4;
  t.tm_yday = 269;
  return t;
}

} // namespace kiln::rt::testing
