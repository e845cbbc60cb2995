// The library rules of runtime/structured/json_schema_library.h, and the helpers that write
// grammar text for runtime/structured/json_schema_grammar.cc.
#include "runtime/structured/json_schema_library.h"

#include <algorithm>
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

// The rule names `body` refers to: identifiers outside literals, classes and {m,n}.
std::vector<std::string> referencedNames(std::string_view body) {
  std::vector<std::string> names;
  for (size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c == '"' || c == '[' || c == '{') {
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      for (++i; i < body.size() && body[i] != close; ++i)
        i += body[i] == '\\' ? 1 : 0;
      ++i;
    } else if (isNameChar(c)) {
      size_t end = i;
      while (end < body.size() && isNameChar(body[end]))
        ++end;
      names.emplace_back(body.substr(i, end - i));
      i = end;
    } else {
      ++i;
    }
  }
  return names;
}

} // namespace

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

} // namespace kiln::structured::json_schema_internal
