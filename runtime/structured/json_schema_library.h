// The fixed half of the grammars that runtime/structured/json_schema_grammar.cc writes: the
// library rules its generated rules refer to (value, string, number, the string formats, ...),
// printed after them when reached, and helpers that spell grammar text in the dialect of
// runtime/structured/grammar.h: integer ranges, and a `pattern` regex's rules
// (runtime/structured/regex_grammar.h) made fit for a JSON string's content. Internal to
// runtime/structured.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::structured::json_schema_internal {

// The upper bound of a repetition that has none.
inline constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

// String formats; each has a library rule "<format>-string".
inline constexpr std::string_view kFormats = "date-time date time uuid email ipv4";

// Errors naming where in the schema (a JSON pointer) and what: "json schema at '<path>': ...";
// unsupported's message is "<what> is not supported yet" (and the note in parentheses).
Status schemaError(StatusCode code, const std::string &path, const std::string &message);
Status invalid(const std::string &path, const std::string &message);
Status unsupported(const std::string &path, const std::string &what, const std::string &note = "");

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

// The largest integer the grammars write: 15 digits, like the library's integer rules.
inline constexpr int64_t kMaxInteger = 999'999'999'999'999;

// Alternatives (joined by " | ", so a rule body) that match exactly the JSON spellings of the
// integers in [lo, hi], where -kMaxInteger <= lo <= hi <= kMaxInteger: no leading zeros, no "-0".
std::string integerRange(int64_t lo, int64_t hi);

// A number bound as decimal digits: |value| = integer.fraction, `integer` without leading zeros
// ("0" for none, at most 15 digits), `fraction` without trailing zeros (at most 15 digits).
struct DecimalBound {
  bool negative = false;
  std::string integer = "0";
  std::string fraction;
  bool exclusive = false; // the bound itself is not in the range
};

// Alternatives (a rule body) that match JSON spellings of the numbers within `lower` and `upper`
// (either may be absent: no bound that side): "-"? integer ( "." 1-15 digits )?, integers of at
// most 15 digits without leading zeros, no exponent, no "-0"; "" when no such number is in range.
std::string decimalRange(const DecimalBound *lower, const DecimalBound *upper);

// One "name ::= body" rule of grammar text.
struct RuleText {
  std::string name, body;
};
struct PatternRules {
  std::vector<RuleText> rules; // "root" first
  size_t elements = 0;         // of the rules compiled: their share of grammar.h's element limit
};

// The rules of `pattern` as regexToJsonStringGrammar() writes them (runtime/structured/
// regex_grammar.h): the pattern's strings as spelled between a JSON string's quotes, '"', '\' and
// controls escaped. An error (the converter's or parseGrammar's) when the pattern does not
// convert or compile.
Result<PatternRules> jsonSafePatternRules(std::string_view pattern);

// True when `body` has a '|' outside parentheses (and outside literals and classes).
bool hasTopLevelAlternation(std::string_view body);

// `body` with every rule reference found in `names` replaced by its mapped name (literals,
// classes and {m,n} counts are left alone).
std::string renameReferences(std::string_view body,
                             const std::map<std::string, std::string> &names);

// A JSON pointer reference token (RFC 6901): '~' and '/' escaped; and back.
std::string pointerToken(std::string_view key);
std::string unescapePointerToken(std::string_view token);

} // namespace kiln::structured::json_schema_internal
