// The fixed half of the grammars that runtime/structured/json_schema_grammar.cc writes: the
// library rules its generated rules refer to (value, string, number, the string formats, ...),
// printed after them when reached, and helpers that spell grammar text in the dialect of
// runtime/structured/grammar.h. Internal to runtime/structured.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::structured::json_schema_internal {

// The upper bound of a repetition that has none.
inline constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

// String formats; each has a library rule "<format>-string".
inline constexpr std::string_view kFormats = "date-time date time uuid email ipv4";

// True when `name` is a library rule's (generated rules take other names).
bool isLibraryRule(std::string_view name);

// The library rules that `bodies` (generated rule bodies) reach, directly or through other library
// rules, as grammar text: one "name ::= body" line each, in the library's order.
std::string libraryRulesReachedFrom(const std::vector<std::string_view> &bodies);

// True for the characters of a rule name.
bool isNameChar(char c);

// The non-empty `parts`, `separator` between each two.
std::string join(const std::vector<std::string> &parts, std::string_view separator);

// A grammar literal that matches exactly the bytes of `text` (UTF-8 passes through as is).
std::string literal(std::string_view text);

// One character (UTF-8 bytes) inside a [class]: escaped as in a literal, and ] [ - ^ too.
std::string classMember(const std::string &character);

// `item` repeated lo..hi times (hi may be kUnbounded); "" when it may not occur at all.
std::string quantified(const std::string &item, uint64_t lo, uint64_t hi);

// True for a rule name or a single literal: text that needs no rule or group of its own.
bool isAtom(std::string_view expr);

} // namespace kiln::structured::json_schema_internal
