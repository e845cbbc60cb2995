// The regex is parsed into a small syntax tree and rewritten so that no repetition repeats
// something that can match "" (runtime/structured/regex_parse.cc), then written as grammar text
// here.
#include "runtime/structured/regex_grammar.h"

#include "runtime/structured/regex_parse.h"
#include "runtime/structured/utf8_ranges.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <utility>

namespace kiln::structured {
namespace {

using regex_internal::CodePointSet;
using regex_internal::complement;
using regex_internal::kAllCodePoints;
using regex_internal::kUnbounded;
using regex_internal::Node;

// ---- Grammar text ----

// Code points written as escapes so the grammar stays readable: controls, invisible spaces and
// format characters, private use and noncharacters.
bool isInvisible(char32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || (cp >= 0x2000 && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
         cp == 0xFEFF || (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xFDD0 && cp <= 0xFDEF) ||
         (cp & 0xFFFE) == 0xFFFE || cp >= 0xF0000;
}

// One code point inside "..." or [...], escaped as grammar.h's dialect requires.
void appendEscaped(std::string &out, char32_t cp, bool inClass) {
  // Pairs of (code point, escape letter); the last four are escaped only inside classes.
  static constexpr std::string_view kEscapes = "\"\"\\\\\nn\rr\tt]][[--^^";
  for (size_t i = 0; i < (inClass ? kEscapes.size() : 10); i += 2) {
    if (cp == static_cast<char32_t>(kEscapes[i])) {
      out += '\\';
      out += kEscapes[i + 1];
      return;
    }
  }
  if (!isInvisible(cp)) {
    for (const uint8_t byte : encodeUtf8(cp)) // utf8_ranges.h
      out += static_cast<char>(byte);
    return;
  }
  char buffer[16];
  const auto [letter, width] = cp <= 0xFF     ? std::pair('x', 2)
                               : cp <= 0xFFFF ? std::pair('u', 4)
                                              : std::pair('U', 8);
  std::snprintf(buffer, sizeof(buffer), "\\%c%0*X", letter, width, static_cast<unsigned>(cp));
  out += buffer;
}

std::string literalText(const std::u32string &text) {
  std::string out = "\"";
  for (const char32_t cp : text)
    appendEscaped(out, cp, /*inClass=*/false);
  return out + "\"";
}

// The code points a JSON string holds only escaped: '"', '\\' and the controls U+0000..U+001F.
bool jsonEscaped(char32_t cp) {
  return cp == '"' || cp == '\\' || cp < 0x20;
}

// How a JSON string spells escaped code point `cp` (RFC 8259: the two-character escapes where
// there is one, else \u00XX): the code points of the escape sequence.
std::u32string jsonEscape(char32_t cp) {
  static constexpr std::string_view kShort = "\"\"\\\\\bb\ff\nn\rr\tt";
  for (size_t i = 0; i < kShort.size(); i += 2)
    if (cp == static_cast<char32_t>(kShort[i]))
      return {U'\\', static_cast<char32_t>(kShort[i + 1])};
  char hex[8];
  std::snprintf(hex, sizeof(hex), "u%04X", static_cast<unsigned>(cp));
  std::u32string out = U"\\";
  for (const char *c = hex; *c; ++c)
    out += static_cast<char32_t>(*c);
  return out;
}

// A literal as it appears inside a JSON string: escaped code points spelled as their escapes.
std::string jsonStringLiteralText(const std::u32string &text) {
  std::u32string spelled;
  for (const char32_t cp : text)
    spelled += jsonEscaped(cp) ? jsonEscape(cp) : std::u32string(1, cp);
  return literalText(spelled);
}

// `.`, [set] or [^complement], whichever is shorter.
std::string classText(const CodePointSet &set) {
  if (set == kAllCodePoints)
    return ".";
  const CodePointSet excluded = complement(set);
  const bool negated = excluded.size() < set.size();
  std::string out = negated ? "[^" : "[";
  for (const auto &[lo, hi] : negated ? excluded : set) {
    appendEscaped(out, lo, /*inClass=*/true);
    if (hi > lo + 1)
      out += '-';
    if (hi > lo)
      appendEscaped(out, hi, /*inClass=*/true);
  }
  return out + "]";
}

std::string quantifierText(int minCount, int maxCount) {
  if (maxCount == kUnbounded && minCount <= 1)
    return minCount == 0 ? "*" : "+";
  if (minCount == 0 && maxCount == 1)
    return "?";
  if (minCount == maxCount)
    return "{" + std::to_string(minCount) + "}";
  const std::string max = maxCount == kUnbounded ? "" : std::to_string(maxCount);
  return "{" + std::to_string(minCount) + "," + max + "}";
}

// Writes rules: `root` first, then one per named group and per group holding an alternation, in
// the order their opening parentheses appear. With `jsonString`, the text matches the strings'
// spellings inside a JSON string instead: '"', '\\' and controls as their escapes.
class GrammarWriter {
public:
  explicit GrammarWriter(bool jsonString) : jsonString_(jsonString) {}

  std::string write(const Node &root) {
    names_.insert("root");
    rules_.push_back({"root", ""});
    std::string body = alternatives(root); // may add rules, moving rules_
    rules_[0].second = std::move(body);
    std::string text;
    for (const auto &[name, ruleBody] : rules_)
      text += name + " ::= " + ruleBody + "\n";
    return text;
  }

private:
  static bool needsRule(const Node &group) {
    return !group.name.empty() || group.children[0].kind == Node::Kind::kAlternation;
  }

  std::string alternatives(const Node &node) {
    if (node.kind == Node::Kind::kGroup && node.name.empty())
      return alternatives(node.children[0]);
    if (node.kind != Node::Kind::kAlternation)
      return sequence(node);
    std::string text;
    for (const Node &branch : node.children)
      text += (text.empty() ? "" : " | ") + sequence(branch);
    return text;
  }

  std::string sequence(const Node &node) {
    const std::string text = items(node);
    return text.empty() ? "\"\"" : text;
  }

  // The items of `node` separated by spaces; "" for the empty string.
  std::string items(const Node &node) {
    if (node.kind != Node::Kind::kSequence)
      return item(node);
    std::string text;
    for (const Node &child : node.children) {
      const std::string childText = item(child);
      if (!childText.empty())
        text += (text.empty() ? "" : " ") + childText;
    }
    return text;
  }

  std::string item(const Node &node) {
    switch (node.kind) {
    case Node::Kind::kLiteral:
      if (node.text.empty())
        return "";
      return jsonString_ ? jsonStringLiteralText(node.text) : literalText(node.text);
    case Node::Kind::kClass:
      return jsonString_ ? jsonStringClassText(node.set) : classText(node.set);
    case Node::Kind::kSequence:
      return items(node);
    case Node::Kind::kAlternation:
      return "(" + alternatives(node) + ")";
    case Node::Kind::kGroup:
      return needsRule(node) ? defineRule(node) : items(node.children[0]);
    case Node::Kind::kRepeat:
      return primary(node.children[0]) + quantifierText(node.minCount, node.maxCount);
    }
    return "";
  }

  // Text a quantifier can follow: a literal, class, rule name or parenthesized expression.
  std::string primary(const Node &node) {
    switch (node.kind) {
    case Node::Kind::kGroup:
      return needsRule(node) ? defineRule(node) : primary(node.children[0]);
    case Node::Kind::kSequence:
      return "(" + sequence(node) + ")";
    case Node::Kind::kAlternation:
      return "(" + alternatives(node) + ")";
    case Node::Kind::kRepeat:
      return "(" + item(node) + ")";
    default:
      return item(node);
    }
  }

  std::string defineRule(const Node &group) {
    const std::string name = group.name.empty() ? uniqueName("group", /*alwaysNumber=*/true)
                                                : uniqueName(group.name, /*alwaysNumber=*/false);
    const size_t index = rules_.size();
    rules_.push_back({name, ""});
    std::string body = alternatives(group.children[0]);
    rules_[index].second = std::move(body);
    return name;
  }

  // Regex group names cannot hold '-', so "name-N" never collides with a group's own name.
  std::string uniqueName(const std::string &base, bool alwaysNumber) {
    if (!alwaysNumber && names_.insert(base).second)
      return base;
    for (int number = alwaysNumber ? 1 : 2;; ++number) {
      std::string candidate = base + "-" + std::to_string(number);
      if (names_.insert(candidate).second)
        return candidate;
    }
  }

  // A class inside a JSON string: its code points that need no escape as a class, and each
  // escaped one as its escape sequence; one alternative needs no parentheses.
  static std::string jsonStringClassText(const CodePointSet &set) {
    CodePointSet plain;
    std::vector<std::string> alternatives;
    for (const auto &[lo, hi] : set)
      for (char32_t cp = lo; cp <= hi;) {
        if (jsonEscaped(cp)) {
          alternatives.push_back(literalText(jsonEscape(cp)));
          ++cp;
          continue;
        }
        // Past the controls only '"' and '\\' are escaped: the plain run ends before the next.
        char32_t end = hi;
        for (const char32_t next : {U'"', U'\\'})
          if (cp < next && next <= end)
            end = next - 1;
        plain.push_back({cp, end});
        cp = end + 1;
      }
    if (!plain.empty())
      alternatives.insert(alternatives.begin(), classText(plain));
    if (alternatives.size() == 1)
      return alternatives[0];
    std::string text;
    for (const std::string &alternative : alternatives)
      text += (text.empty() ? "(" : " | ") + alternative;
    return text + ")";
  }

  bool jsonString_;
  std::vector<std::pair<std::string, std::string>> rules_; // name, body
  std::set<std::string> names_;
};

} // namespace

Result<std::string> regexToGrammar(std::string_view pattern) {
  KILN_ASSIGN_OR_RETURN(Node root, regex_internal::parseRegex(pattern));
  return GrammarWriter(false).write(regex_internal::repeatOnlyNonEmpty(std::move(root)));
}

Result<std::string> regexToJsonStringGrammar(std::string_view pattern) {
  KILN_ASSIGN_OR_RETURN(Node root, regex_internal::parseRegex(pattern));
  return GrammarWriter(true).write(regex_internal::repeatOnlyNonEmpty(std::move(root)));
}

Result<std::string> choiceGrammar(const std::vector<std::string> &choices) {
  if (choices.empty())
    return invalidArgument("choice list is empty: no output can match it");
  std::set<std::string_view> seen;
  std::string body;
  for (size_t i = 0; i < choices.size(); ++i) {
    std::u32string text;
    for (size_t pos = 0; pos < choices[i].size();) {
      uint32_t cp = 0;
      const size_t length = decodeUtf8(std::string_view(choices[i]).substr(pos), cp);
      if (length == 0) {
        return invalidArgument("choice " + std::to_string(i) + ": invalid UTF-8 at offset " +
                               std::to_string(pos));
      }
      text += static_cast<char32_t>(cp);
      pos += length;
    }
    if (seen.insert(choices[i]).second)
      body += (body.empty() ? "" : " | ") + literalText(text);
  }
  return "root ::= " + body + "\n";
}

} // namespace kiln::structured
