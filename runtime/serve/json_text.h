// JSON text helpers that never throw: model output may hold bytes that are not UTF-8 (a token
// that is half of a character), and nlohmann's dump() throws on those by default.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace kiln::rt::serve {

// Compact JSON; invalid UTF-8 inside strings becomes U+FFFD.
std::string dumpJson(const nlohmann::json &value);
std::string dumpJson(const nlohmann::ordered_json &value);

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid UTF-8.
size_t firstInvalidUtf8(std::string_view text);

// `text` with every invalid sequence replaced by U+FFFD (so it can go into JSON unchanged).
std::string sanitizeUtf8(std::string_view text);

} // namespace kiln::rt::serve
