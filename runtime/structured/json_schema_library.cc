// The library rules of runtime/structured/json_schema_library.h, and the helpers that write
// grammar text for runtime/structured/json_schema_grammar.cc.
#include "runtime/structured/json_schema_library.h"

#include "runtime/structured/grammar.h"
#include "runtime/structured/regex_grammar.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

namespace kiln::structured::json_schema_internal {
namespace {

// Building blocks, printed after the generated rules in this order when something uses them.
// Numbers are bounded (15 integer digits, 15 fraction digits, 3 exponent digits) and whitespace
// is one optional space, so a model cannot stay inside either forever; strings and arrays end
// only when the model ends them, unless the schema bounds them.
struct LibraryRule {
  std::string_view name;
  std::string_view body;
};
constexpr LibraryRule kLibrary[] = {
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object", R"("{" ( member ( "," ws member )* )? "}")"},
    {"member", R"(string ":" ws value)"},
    {"array", R"("[" ( value ( "," ws value )* )? "]")"},
    {"string", R"("\"" char* "\"")"},
    {"char", R"(plain-char | "\\" ( [\"\\/bfnrt] | "u" hex{4} ))"},
    {"plain-char", R"([^\"\\\x00-\x1F])"},
    {"hex", R"([0-9a-fA-F])"},
    {"number", R"(integer frac? exp?)"},
    {"nonneg-number", R"(nonneg-integer frac? exp?)"},
    {"integer", R"("-"? nonneg-integer)"},
    {"nonneg-integer", R"("0" | [1-9] [0-9]{0,14})"},
    {"pos-integer", R"([1-9] [0-9]{0,14})"},
    {"frac", R"("." [0-9]{1,15})"},
    {"exp", R"([eE] [+\-]? [0-9]{1,3})"},
    {"boolean", R"("true" | "false")"},
    {"null", R"("null")"},
    {"date-time-string", R"("\"" date "T" time "\"")"},
    {"date-string", R"("\"" date "\"")"},
    {"time-string", R"("\"" time "\"")"},
    // RFC 3339 full-date: days per month, February up to 28 (the 29th exists only in leap years:
    // a grammar cannot count years, so it keeps to the dates valid in every year).
    {"date",
     R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"
     R"( | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ))"
     R"( | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))"},
    // RFC 3339 full-time without leap seconds (:60 is valid only at the end of a UTC day, which a
    // grammar cannot tell from the offset); the offset is not optional.
    {"time", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9])"
             R"( ( "." [0-9]{1,9} )? ( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"uuid-string", R"("\"" hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12} "\"")"},
    {"email-string", R"("\"" [a-zA-Z0-9._%+\-]{1,64} "@" domain-label ( "." domain-label )+ "\"")"},
    {"domain-label", R"([a-zA-Z0-9\-]{1,63})"},
    {"ipv4-string", R"("\"" ipv4-octet "." ipv4-octet "." ipv4-octet "." ipv4-octet "\"")"},
    {"ipv4-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])"},
    {"ws", R"(" "?)"},
};

const LibraryRule *findLibraryRule(std::string_view name) {
  for (const LibraryRule &rule : kLibrary)
    if (rule.name == name)
      return &rule;
  return nullptr;
}

void appendHexEscape(std::string &out, unsigned byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += "\\x";
  out += kHex[(byte >> 4) & 15];
  out += kHex[byte & 15];
}

// Calls `onText(text, isName)` for each piece of `body` in order: rule names (isName), and the
// other text, where literals, classes and {m,n} are whole pieces (their insides are no names).
template <typename OnText> void scanBody(std::string_view body, OnText onText) {
  for (size_t i = 0; i < body.size();) {
    const size_t start = i;
    const char c = body[i];
    if (c == '"' || c == '[' || c == '{') {
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      for (++i; i < body.size() && body[i] != close; ++i)
        i += body[i] == '\\' ? 1 : 0;
      i = std::min(i + 1, body.size());
    } else if (isNameChar(c)) {
      while (i < body.size() && isNameChar(body[i]))
        ++i;
    } else {
      ++i;
    }
    onText(body.substr(start, i - start), isNameChar(c));
  }
}

// The rule names `body` refers to: identifiers outside literals, classes and {m,n}.
std::vector<std::string> referencedNames(std::string_view body) {
  std::vector<std::string> names;
  scanBody(body, [&](std::string_view text, bool isName) {
    if (isName)
      names.emplace_back(text);
  });
  return names;
}

// Digits `from`..`to` as a literal or a class.
std::string digits(char from, char to) {
  return from == to ? literal(std::string(1, from)) : std::string{'[', from, '-', to, ']'};
}

// `head` followed by one of `tails`. Two literals in a row become one: the literals here are of
// digits and '-', which have no escapes.
std::string followedBy(const std::string &head, const std::vector<std::string> &tails) {
  if (tails.size() > 1)
    return head + " ( " + join(tails, " | ") + " )";
  const std::string &tail = tails[0];
  if (head.front() == '"' && isAtom(head) && tail.front() == '"')
    return head.substr(0, head.size() - 1) + tail.substr(1);
  return join({head, tail}, " ");
}

// Alternatives that match the digit strings from `low` to `high` (as many digits each, low <=
// high). Past the common prefix, the first digit that differs splits the range: `low`'s digit
// with its continuations up to 9...9, the digits in between with any continuation, `high`'s digit
// with its continuations from 0...0 (the ends merge into the middle when they take all).
std::vector<std::string> sameLengthRange(std::string_view low, std::string_view high) {
  size_t common = 0;
  while (common < low.size() && low[common] == high[common])
    ++common;
  const std::string prefix = common > 0 ? literal(low.substr(0, common)) : "";
  if (common == low.size())
    return {prefix};
  const std::string_view lowRest = low.substr(common + 1), highRest = high.substr(common + 1);
  const bool lowTakesAll = lowRest.find_first_not_of('0') == std::string_view::npos;
  const bool highTakesAll = highRest.find_first_not_of('9') == std::string_view::npos;
  const char lowDigit = low[common], highDigit = high[common];
  const char from = lowTakesAll ? lowDigit : lowDigit + 1;
  const char to = highTakesAll ? highDigit : highDigit - 1;
  std::vector<std::string> alternatives;
  if (!lowTakesAll)
    alternatives.push_back(followedBy(digits(lowDigit, lowDigit),
                                      sameLengthRange(lowRest, std::string(lowRest.size(), '9'))));
  if (from <= to)
    alternatives.push_back(
        join({digits(from, to), quantified("[0-9]", lowRest.size(), lowRest.size())}, " "));
  if (!highTakesAll)
    alternatives.push_back(
        followedBy(digits(highDigit, highDigit),
                   sameLengthRange(std::string(highRest.size(), '0'), highRest)));
  return prefix.empty() ? alternatives : std::vector<std::string>{followedBy(prefix, alternatives)};
}

int64_t powerOfTen(size_t exponent) {
  int64_t power = 1;
  while (exponent-- > 0)
    power *= 10;
  return power;
}

// Alternatives for the integers in [lo, hi], 0 <= lo <= hi, length by length: the lengths that
// lie wholly inside the range (consecutive ones) together as [1-9] [0-9]{m,n}, the others (at most
// the shortest and the longest) by sameLengthRange.
std::vector<std::string> nonNegativeRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  if (lo == 0) {
    alternatives.push_back(literal("0"));
    if (hi == 0)
      return alternatives;
    lo = 1;
  }
  const size_t shortest = std::to_string(lo).size(), longest = std::to_string(hi).size();
  size_t wholeFrom = 0, wholeTo = 0; // the lengths wholly inside, when wholeFrom > 0
  for (size_t length = shortest; length <= longest; ++length) {
    const int64_t first = powerOfTen(length - 1), last = powerOfTen(length) - 1;
    if (lo <= first && last <= hi) {
      wholeFrom = wholeFrom > 0 ? wholeFrom : length;
      wholeTo = length;
      continue;
    }
    if (wholeFrom > 0) // only the longest length can follow whole ones
      alternatives.push_back(join({"[1-9]", quantified("[0-9]", wholeFrom - 1, wholeTo - 1)}, " "));
    wholeFrom = 0;
    for (std::string &range :
         sameLengthRange(std::to_string(std::max(lo, first)), std::to_string(std::min(hi, last))))
      alternatives.push_back(std::move(range));
  }
  if (wholeFrom > 0)
    alternatives.push_back(join({"[1-9]", quantified("[0-9]", wholeFrom - 1, wholeTo - 1)}, " "));
  return alternatives;
}

// Fraction digit strings (after the ".", at most `room` digits) as alternatives, and whether the
// empty string (no fraction written: the value's integer part alone) is one of them.
struct FractionSet {
  std::vector<std::string> nonEmpty;
  bool empty = false;
};

// One side of a fraction's bound: nullopt when that side is free; else the bound's remaining
// digits (no trailing zeros; "" for 0) and whether the bound itself is excluded.
struct FractionSide {
  std::optional<std::string> digits;
  bool exclusive = false;
  FractionSide rest() const { return {digits->substr(1), exclusive}; }
};

// `set`'s strings as one expression (`set` has a non-empty one): "( a | b )" or "a", then "?"
// when the empty string belongs too.
std::string optionalGroup(const FractionSet &set) {
  const std::string alternatives = join(set.nonEmpty, " | ");
  const std::string group =
      set.nonEmpty.size() == 1 && isAtom(alternatives) ? alternatives : "( " + alternatives + " )";
  return set.empty ? group + "?" : group;
}

// The digit strings F of at most `room` digits with lower <= 0.F <= upper (each side as given):
// digit by digit, the first digit either frees a side (it passes that side's digit) or keeps it
// bound (it equals that side's digit) for the rest.
FractionSet fractionsWithin(const FractionSide &lower, const FractionSide &upper, size_t room) {
  FractionSet set;
  // At most 0 with no lower bound above 0: zeros only (the upper bound's fraction ran out).
  const bool lowerFree = !lower.digits || (lower.digits->empty() && !lower.exclusive);
  if (upper.digits && upper.digits->empty() && lowerFree) {
    set.empty = !upper.exclusive;
    if (set.empty && room > 0)
      set.nonEmpty.push_back(quantified(literal("0"), 1, room));
    return set;
  }
  // 0.F = 0 (no digits, or only zeros): in range when no lower bound excludes 0 and the upper
  // one is not 0 exclusive.
  const bool upperAllowsZero = !upper.digits || !upper.digits->empty() || !upper.exclusive;
  set.empty = lowerFree && upperAllowsZero;
  if (room == 0)
    return set;
  // The lowest first digit allowed and whether it binds the lower side; likewise the highest.
  char lowDigit = '0', highDigit = '9';
  bool lowBinds = false, highBinds = false;
  if (lower.digits) {
    lowDigit = lower.digits->empty() ? '0' : (*lower.digits)[0];
    lowBinds = !lower.digits->empty() || lower.exclusive;
  }
  if (upper.digits) {
    highDigit = upper.digits->empty() ? '0' : (*upper.digits)[0];
    highBinds = true;
  }
  if (lowDigit > highDigit)
    return set;
  const std::string anyRest = quantified("[0-9]", 0, room - 1);
  auto withRest = [&](char digit, const FractionSet &rest) {
    std::string head = literal(std::string(1, digit));
    if (rest.nonEmpty.empty())
      return head;
    return join({head, optionalGroup(rest)}, " ");
  };
  // A bound side whose digits ran out ("" left) continues as the bound 0 (lower) / 0 (upper).
  const FractionSide lowerRest = lower.digits && !lower.digits->empty() ? lower.rest() : lower;
  const FractionSide upperRest = upper.digits && !upper.digits->empty() ? upper.rest() : upper;
  if (lowDigit == highDigit && (lowBinds || highBinds)) {
    const FractionSet rest = fractionsWithin(lowBinds ? lowerRest : FractionSide{},
                                             highBinds ? upperRest : FractionSide{}, room - 1);
    if (!rest.nonEmpty.empty() || rest.empty)
      set.nonEmpty.push_back(withRest(lowDigit, rest));
    return set;
  }
  char from = lowDigit, to = highDigit;
  if (lowBinds) {
    const FractionSet rest = fractionsWithin(lowerRest, FractionSide{}, room - 1);
    if (!rest.nonEmpty.empty() || rest.empty)
      set.nonEmpty.push_back(withRest(lowDigit, rest));
    ++from;
  }
  if (highBinds)
    --to;
  if (from <= to)
    set.nonEmpty.push_back(join({digits(from, to), anyRest}, " "));
  if (highBinds) {
    const FractionSet rest = fractionsWithin(FractionSide{}, upperRest, room - 1);
    if (!rest.nonEmpty.empty() || rest.empty)
      set.nonEmpty.push_back(withRest(highDigit, rest));
  }
  return set;
}

// `integer` then a fraction within the sides, or nothing when none is.
std::optional<std::string> withFraction(const std::string &integer, const FractionSide &lower,
                                        const FractionSide &upper) {
  constexpr size_t kFractionDigits = 15; // the library's frac rule
  const FractionSet set = fractionsWithin(lower, upper, kFractionDigits);
  if (set.nonEmpty.empty())
    return set.empty ? std::optional<std::string>(integer) : std::nullopt;
  const std::string fraction = join({literal("."), optionalGroup({set.nonEmpty, false})}, " ");
  return join({integer, set.empty ? "( " + fraction + " )?" : fraction}, " ");
}

int64_t integerOf(const std::string &digits) {
  return std::stoll(digits);
}

// Magnitudes (>= 0) from `lower` to `upper` (absent: up to the largest 15-digit integer with any
// fraction), each side's own exclusivity; the bounds' signs are ignored.
std::vector<std::string> magnitudesWithin(const DecimalBound &lower, const DecimalBound *upper) {
  const int64_t lowInteger = integerOf(lower.integer);
  const int64_t highInteger = upper ? integerOf(upper->integer) : kMaxInteger;
  const FractionSide lowSide{lower.fraction, lower.exclusive};
  const FractionSide highSide =
      upper ? FractionSide{upper->fraction, upper->exclusive} : FractionSide{};
  std::vector<std::string> alternatives;
  if (lowInteger > highInteger)
    return alternatives;
  if (lowInteger == highInteger) {
    if (auto one = withFraction(literal(lower.integer), lowSide, highSide))
      alternatives.push_back(*one);
    return alternatives;
  }
  if (auto first = withFraction(literal(lower.integer), lowSide, FractionSide{}))
    alternatives.push_back(*first);
  if (lowInteger + 1 <= highInteger - 1) {
    const std::string between = integerRange(lowInteger + 1, highInteger - 1);
    alternatives.push_back(
        *withFraction(between.find(" | ") == std::string::npos ? between : "( " + between + " )",
                      FractionSide{}, FractionSide{}));
  }
  if (auto last = withFraction(literal(upper ? upper->integer : std::to_string(kMaxInteger)),
                               FractionSide{}, highSide))
    alternatives.push_back(*last);
  return alternatives;
}

} // namespace

Status schemaError(StatusCode code, const std::string &path, const std::string &message) {
  return Status(code, "json schema at '" + path + "': " + message);
}

Status invalid(const std::string &path, const std::string &message) {
  return schemaError(StatusCode::kInvalidArgument, path, message);
}

Status unsupported(const std::string &path, const std::string &what, const std::string &note) {
  return schemaError(StatusCode::kUnimplemented, path,
                     what + " is not supported yet" + (note.empty() ? "" : " (" + note + ")"));
}

bool isLibraryRule(std::string_view name) {
  return findLibraryRule(name) != nullptr;
}

std::string libraryRulesReachedFrom(const std::vector<std::string_view> &bodies) {
  std::set<std::string> used;
  std::vector<std::string> pending;
  for (std::string_view body : bodies)
    for (std::string &name : referencedNames(body))
      pending.push_back(std::move(name));
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    const LibraryRule *library = findLibraryRule(name);
    if (library == nullptr || !used.insert(name).second)
      continue;
    for (std::string &next : referencedNames(library->body))
      pending.push_back(std::move(next));
  }
  std::string out;
  for (const LibraryRule &rule : kLibrary)
    if (used.count(std::string(rule.name)))
      out += std::string(rule.name) + " ::= " + std::string(rule.body) + "\n";
  return out;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

std::string join(const std::vector<std::string> &parts, std::string_view separator) {
  std::string out;
  for (const std::string &part : parts) {
    if (part.empty())
      continue;
    if (!out.empty())
      out += separator;
    out += part;
  }
  return out;
}

std::string literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (byte < 0x20 || byte == 0x7F)
      appendHexEscape(out, byte);
    else
      out += c;
  }
  return out + "\"";
}

std::string classMember(const std::string &character) {
  if (character.size() == 1 && std::string_view("[]^-").find(character[0]) != std::string::npos)
    return {'\\', character[0]};
  const std::string quoted = literal(character);
  return quoted.substr(1, quoted.size() - 2);
}

std::string quantified(const std::string &item, uint64_t lo, uint64_t hi) {
  if (hi == 0)
    return "";
  if (lo == 1 && hi == 1)
    return item;
  if (lo == 0 && hi == 1)
    return item + "?";
  if (hi == kUnbounded)
    return lo == 0 ? item + "*" : lo == 1 ? item + "+" : item + "{" + std::to_string(lo) + ",}";
  if (lo == hi)
    return item + "{" + std::to_string(lo) + "}";
  return item + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

bool isAtom(std::string_view expr) {
  if (!expr.empty() && std::all_of(expr.begin(), expr.end(), isNameChar))
    return true;
  if (expr.size() < 2 || expr.front() != '"')
    return false;
  for (size_t i = 1; i < expr.size(); ++i) {
    if (expr[i] == '\\')
      ++i;
    else if (expr[i] == '"')
      return i + 1 == expr.size();
  }
  return false;
}

std::string integerRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  if (lo < 0) // the negative ones mirrored: "-" and a magnitude of at least 1 (no "-0")
    alternatives.push_back(followedBy(literal("-"), nonNegativeRange(hi < 0 ? -hi : 1, -lo)));
  if (hi >= 0)
    for (std::string &range : nonNegativeRange(std::max<int64_t>(lo, 0), hi))
      alternatives.push_back(std::move(range));
  return join(alternatives, " | ");
}

// Split at 0: the non-negative numbers as magnitudes from max(lower, 0), and the negative ones
// as "-" and magnitudes from max(-upper, 0) exclusive of 0 (no "-0") up to -lower.
std::string decimalRange(const DecimalBound *lower, const DecimalBound *upper) {
  const auto isZero = [](const DecimalBound &b) { return b.integer == "0" && b.fraction.empty(); };
  const auto positive = [&](const DecimalBound *b) { return b && !b->negative && !isZero(*b); };
  const auto negative = [&](const DecimalBound *b) { return b && b->negative && !isZero(*b); };
  std::vector<std::string> alternatives;
  // Non-negative values: when the upper bound is absent, positive, or 0 inclusive.
  if (!upper || positive(upper) || (isZero(*upper) && !upper->exclusive)) {
    DecimalBound from; // 0 inclusive unless the lower bound is at or above 0
    if (lower && !negative(lower))
      from = *lower;
    from.negative = false;
    for (std::string &range : magnitudesWithin(from, upper))
      alternatives.push_back(std::move(range));
  }
  // Negative values: when the lower bound is absent or negative.
  if (!lower || negative(lower)) {
    DecimalBound from; // magnitudes above 0, or from -upper when upper is negative
    from.exclusive = true;
    if (negative(upper))
      from = *upper;
    std::vector<std::string> magnitudes = magnitudesWithin(from, lower);
    if (!magnitudes.empty())
      alternatives.push_back(join({literal("-"), "( " + join(magnitudes, " | ") + " )"}, " "));
  }
  return join(alternatives, " | ");
}

Result<PatternRules> jsonSafePatternRules(std::string_view pattern) {
  KILN_ASSIGN_OR_RETURN(std::string text, regexToJsonStringGrammar(pattern));
  KILN_ASSIGN_OR_RETURN(Grammar compiled, parseGrammar(text));
  // regexToJsonStringGrammar writes one "name ::= body" line per rule, "root" first; its literals
  // and classes write newlines as escapes (runtime/structured/regex_grammar.cc).
  PatternRules out;
  for (const GrammarRule &rule : compiled.rules)
    for (const std::vector<GrammarElement> &sequence : rule.alternatives)
      out.elements += sequence.size();
  for (size_t line = 0; line < text.size();) {
    const size_t end = std::min(text.find('\n', line), text.size());
    const size_t arrow = text.find(" ::= ", line);
    if (arrow == std::string::npos || arrow > end)
      return Status(StatusCode::kInternal, "regex grammar line without ' ::= ': " + text);
    out.rules.push_back({text.substr(line, arrow - line), text.substr(arrow + 5, end - arrow - 5)});
    line = end + 1;
  }
  return out;
}

bool hasTopLevelAlternation(std::string_view body) {
  int depth = 0;
  bool found = false;
  scanBody(body, [&](std::string_view text, bool) {
    depth += text == "(" ? 1 : text == ")" ? -1 : 0;
    found = found || (text == "|" && depth == 0);
  });
  return found;
}

std::string renameReferences(std::string_view body,
                             const std::map<std::string, std::string> &names) {
  std::string out;
  scanBody(body, [&](std::string_view text, bool isName) {
    const auto renamed = isName ? names.find(std::string(text)) : names.end();
    out += renamed != names.end() ? renamed->second : std::string(text);
  });
  return out;
}

std::string pointerToken(std::string_view key) {
  std::string out;
  for (char c : key)
    out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

std::string unescapePointerToken(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1'))
      out += token[++i] == '0' ? '~' : '/';
    else
      out += token[i];
  }
  return out;
}

} // namespace kiln::structured::json_schema_internal
