// Parses the grammar text of grammar.h by recursive descent and compiles it on the way: groups
// and quantified items become generated rules, code point sets become alternatives of UTF-8 byte
// range sequences (utf8_ranges.h).
#include "runtime/structured/grammar.h"

#include "runtime/structured/utf8_ranges.h"

#include <algorithm>
#include <map>

namespace kiln::structured {
namespace {

constexpr int kMaxRepeat = 1000;
// Elements a compiled grammar may hold (about 12 bytes each): a request's text is small, but
// repetition multiplies it, and nested counts must not turn a few bytes into gigabytes.
constexpr size_t kMaxElements = size_t(1) << 20;
// Groups open at once: the parser recurses per group. Converted schemas nest a group per optional
// member of an object, so this allows objects of a few hundred optional members.
constexpr int kMaxDepth = 1000;

using Sequence = std::vector<GrammarElement>;
using Alternatives = std::vector<Sequence>;

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
public:
  explicit Parser(std::string_view text) : text_(text) {}
  Result<Grammar> parse();

private:
  // --- text position and errors
  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return atEnd() ? '\0' : text_[pos_]; }
  Status error(const std::string &what) const;
  void skipSpace(bool newlines);
  bool nextLineContinues();
  // --- rules
  uint32_t ruleNamed(const std::string &name);
  uint32_t generatedRule(const std::string &base, Alternatives alternatives);
  Status parseRule();
  Result<Alternatives> parseAlternatives(bool nested);
  Result<Sequence> parseSequence(bool nested);
  Result<Sequence> parsePrimary(bool nested);
  Status applyQuantifier(Sequence &item);
  Result<Sequence> repeat(const Sequence &item, int min, int max);
  // --- terminals
  Result<uint32_t> parseEscape(bool inClass);
  Result<uint32_t> parseCodePoint(bool inClass);
  Result<Sequence> parseLiteral();
  Result<Sequence> parseClass();
  Result<Sequence> codePointSet(std::vector<CodePointRange> ranges, bool negated);
  Result<int> parseNumber();
  std::string parseName();
  // Counts `n` more elements against kMaxElements.
  Status charge(size_t n);
  Status checkRules() const;

  std::string_view text_;
  size_t pos_ = 0;
  Grammar grammar_;
  std::map<std::string, uint32_t> ruleIds_;
  std::vector<bool> defined_;
  std::vector<size_t> firstUse_; // where each rule was first referenced (errors)
  int generated_ = 0;
  size_t elements_ = 0;
  int depth_ = 0; // groups open
};

Status Parser::charge(size_t n) {
  elements_ += n;
  if (elements_ > kMaxElements)
    return error("the grammar compiles to more than " + std::to_string(kMaxElements) +
                 " elements (repetition counts multiply); make it smaller");
  return okStatus();
}

Status Parser::error(const std::string &what) const {
  int line = 1, column = 1;
  for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
    column = text_[i] == '\n' ? 1 : column + 1;
    line += text_[i] == '\n';
  }
  return invalidArgument("grammar line " + std::to_string(line) + ", column " +
                         std::to_string(column) + ": " + what);
}

void Parser::skipSpace(bool newlines) {
  while (!atEnd()) {
    const char c = peek();
    if (c == '#') {
      while (!atEnd() && peek() != '\n')
        ++pos_;
    } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
      ++pos_;
    } else {
      return;
    }
  }
}

// At a newline ending a top-level sequence: whether the rule goes on (the next line that is not
// blank or a comment starts with '|'); if so, moves there.
bool Parser::nextLineContinues() {
  const size_t saved = pos_;
  skipSpace(true);
  if (peek() == '|')
    return true;
  pos_ = saved;
  return false;
}

uint32_t Parser::ruleNamed(const std::string &name) {
  auto [it, inserted] = ruleIds_.try_emplace(name, static_cast<uint32_t>(grammar_.rules.size()));
  if (inserted) {
    grammar_.rules.push_back({name, {}});
    defined_.push_back(false);
    firstUse_.push_back(pos_);
  }
  return it->second;
}

uint32_t Parser::generatedRule(const std::string &base, Alternatives alternatives) {
  const auto id = static_cast<uint32_t>(grammar_.rules.size());
  grammar_.rules.push_back({base + "_" + std::to_string(++generated_), std::move(alternatives)});
  defined_.push_back(true);
  firstUse_.push_back(pos_);
  return id;
}

std::string Parser::parseName() {
  const size_t start = pos_;
  while (!atEnd() && isNameChar(peek()))
    ++pos_;
  return std::string(text_.substr(start, pos_ - start));
}

Result<int> Parser::parseNumber() {
  int value = 0, digits = 0;
  while (!atEnd() && peek() >= '0' && peek() <= '9') {
    value = value * 10 + (peek() - '0');
    ++pos_;
    if (++digits > 4)
      return error("a repetition count above " + std::to_string(kMaxRepeat));
  }
  if (digits == 0)
    return error("expected a number");
  return value;
}

Status Parser::parseRule() {
  const std::string name = parseName();
  if (name.empty())
    return error("expected a rule name");
  skipSpace(false);
  if (text_.substr(pos_, 3) != "::=")
    return error("expected '::=' after rule name '" + name + "'");
  pos_ += 3;
  const uint32_t id = ruleNamed(name);
  if (defined_[id])
    return error("rule '" + name + "' is defined twice");
  KILN_ASSIGN_OR_RETURN(Alternatives alternatives, parseAlternatives(false));
  grammar_.rules[id].alternatives = std::move(alternatives);
  defined_[id] = true;
  return okStatus();
}

Result<Alternatives> Parser::parseAlternatives(bool nested) {
  Alternatives alternatives;
  while (true) {
    KILN_ASSIGN_OR_RETURN(Sequence sequence, parseSequence(nested));
    alternatives.push_back(std::move(sequence));
    skipSpace(nested);
    if (peek() == '\n' && !nested && !nextLineContinues())
      return alternatives;
    if (peek() != '|')
      return alternatives;
    ++pos_;
  }
}

Result<Sequence> Parser::parseSequence(bool nested) {
  Sequence sequence;
  while (true) {
    skipSpace(nested);
    const char c = peek();
    if (atEnd() || c == '|' || c == ')' || c == '\n')
      return sequence;
    KILN_ASSIGN_OR_RETURN(Sequence item, parsePrimary(nested));
    KILN_RETURN_IF_ERROR(applyQuantifier(item));
    sequence.insert(sequence.end(), item.begin(), item.end());
  }
}

Result<Sequence> Parser::parsePrimary(bool nested) {
  const char c = peek();
  if (c == '"')
    return parseLiteral();
  if (c == '[')
    return parseClass();
  if (c == '.') {
    ++pos_;
    return codePointSet({}, /*negated=*/true);
  }
  if (c == '(') {
    if (++depth_ > kMaxDepth) // the parser recurses per group: bound it, as the text is a request's
      return error("groups nested deeper than " + std::to_string(kMaxDepth));
    ++pos_;
    KILN_ASSIGN_OR_RETURN(Alternatives inner, parseAlternatives(true));
    --depth_;
    skipSpace(true);
    if (peek() != ')')
      return error("expected ')'");
    ++pos_;
    if (inner.size() == 1)
      return inner.front();
    GrammarElement ref{GrammarElement::Kind::kRule, 0, 0, generatedRule("group", inner)};
    return Sequence{ref};
  }
  if (isNameChar(c)) {
    const size_t start = pos_;
    const std::string name = parseName();
    skipSpace(false);
    if (!nested && text_.substr(pos_, 3) == "::=") { // the next rule: this sequence has ended
      pos_ = start;
      return error("expected a newline before rule '" + name + "'");
    }
    return Sequence{{GrammarElement::Kind::kRule, 0, 0, ruleNamed(name)}};
  }
  return error(std::string("unexpected '") + c + "'");
}

// item* -> R ::= item R | ""; item+ -> item item*; item? -> R ::= item | ""; {m,n} -> m copies,
// then n - m nested optionals (or a star when unbounded). Right recursion keeps the matcher's
// stacks shallow per repetition.
Result<Sequence> Parser::repeat(const Sequence &item, int min, int max) {
  const size_t copies = static_cast<size_t>(max < 0 ? min + 1 : max);
  KILN_RETURN_IF_ERROR(charge(copies * (item.size() + 1)));
  Sequence out;
  for (int i = 0; i < min; ++i)
    out.insert(out.end(), item.begin(), item.end());
  if (max < 0) {
    const auto star = static_cast<uint32_t>(grammar_.rules.size());
    Sequence again = item;
    again.push_back({GrammarElement::Kind::kRule, 0, 0, star});
    generatedRule("star", {again, {}});
    out.push_back({GrammarElement::Kind::kRule, 0, 0, star});
    return out;
  }
  Sequence tail; // the optional remainder, innermost first
  for (int i = min; i < max; ++i) {
    Sequence present = item;
    present.insert(present.end(), tail.begin(), tail.end());
    tail = {{GrammarElement::Kind::kRule, 0, 0, generatedRule("opt", {present, {}})}};
  }
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

Status Parser::applyQuantifier(Sequence &item) {
  int min = 1, max = 1;
  const char c = peek();
  if (c == '*' || c == '+' || c == '?') {
    ++pos_;
    min = c == '+' ? 1 : 0;
    max = c == '?' ? 1 : -1;
  } else if (c == '{') {
    ++pos_;
    KILN_ASSIGN_OR_RETURN(min, parseNumber());
    max = min;
    if (peek() == ',') {
      ++pos_;
      max = peek() == '}' ? -1 : 0;
      if (max == 0) {
        KILN_ASSIGN_OR_RETURN(max, parseNumber());
      }
    }
    if (peek() != '}')
      return error("expected '}'");
    ++pos_;
    if (min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && max < min))
      return error("repetition {" + std::to_string(min) + "," + std::to_string(max) +
                   "}: need m <= n <= " + std::to_string(kMaxRepeat));
  } else {
    return okStatus();
  }
  if (item.size() != 1) { // quantify the whole item: one element
    const uint32_t group = generatedRule("group", {item});
    item = {{GrammarElement::Kind::kRule, 0, 0, group}};
  }
  KILN_ASSIGN_OR_RETURN(item, repeat(item, min, max));
  return okStatus();
}

Result<uint32_t> Parser::parseEscape(bool inClass) {
  const char c = peek();
  ++pos_;
  auto hex = [&](int digits) -> Result<uint32_t> {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = peek();
      const int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (v < 0)
        return error("expected " + std::to_string(digits) + " hex digits");
      value = value * 16 + static_cast<uint32_t>(v);
    }
    return value;
  };
  switch (c) {
  case 'n':
    return uint32_t('\n');
  case 'r':
    return uint32_t('\r');
  case 't':
    return uint32_t('\t');
  case '"':
  case '\\':
  case '/':
    return uint32_t(c);
  case 'x':
    return hex(2);
  case 'u':
    return hex(4);
  case 'U':
    return hex(8);
  default:
    if (inClass && (c == ']' || c == '[' || c == '-' || c == '^'))
      return uint32_t(c);
    --pos_;
    return error(std::string("unknown escape '\\") + c + "'");
  }
}

Result<uint32_t> Parser::parseCodePoint(bool inClass) {
  if (atEnd())
    return error("unexpected end of the grammar");
  if (peek() == '\\') {
    ++pos_;
    KILN_ASSIGN_OR_RETURN(uint32_t escaped, parseEscape(inClass));
    if (escaped > kMaxCodePoint || (escaped >= 0xD800 && escaped <= 0xDFFF))
      return error("escape is not a Unicode scalar value");
    return escaped;
  }
  uint32_t cp = 0;
  const size_t length = decodeUtf8(text_.substr(pos_), cp);
  if (length == 0)
    return error("invalid UTF-8");
  pos_ += length;
  return cp;
}

Result<Sequence> Parser::parseLiteral() {
  ++pos_; // the opening quote
  Sequence out;
  while (peek() != '"') {
    if (atEnd() || peek() == '\n')
      return error("unterminated literal");
    KILN_ASSIGN_OR_RETURN(uint32_t cp, parseCodePoint(false));
    for (uint8_t byte : encodeUtf8(cp))
      out.push_back({GrammarElement::Kind::kBytes, byte, byte, 0});
  }
  ++pos_;
  KILN_RETURN_IF_ERROR(charge(out.size()));
  return out;
}

Result<Sequence> Parser::parseClass() {
  ++pos_; // '['
  const bool negated = peek() == '^';
  pos_ += negated;
  std::vector<CodePointRange> ranges;
  while (peek() != ']') {
    if (atEnd() || peek() == '\n')
      return error("unterminated character class");
    KILN_ASSIGN_OR_RETURN(uint32_t lo, parseCodePoint(true));
    uint32_t hi = lo;
    if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
      ++pos_;
      KILN_ASSIGN_OR_RETURN(hi, parseCodePoint(true));
      if (hi < lo)
        return error("class range is backwards");
    }
    ranges.push_back({lo, hi});
  }
  ++pos_;
  return codePointSet(std::move(ranges), negated);
}

// The set's UTF-8 byte sequences: one element when a single byte range covers it, else a
// generated rule with one alternative per sequence.
Result<Sequence> Parser::codePointSet(std::vector<CodePointRange> ranges, bool negated) {
  Alternatives alternatives;
  for (const ByteRangeSequence &sequence : utf8ByteRanges(ranges, negated)) {
    Sequence seq;
    for (const ByteRange &r : sequence)
      seq.push_back({GrammarElement::Kind::kBytes, r.lo, r.hi, 0});
    alternatives.push_back(std::move(seq));
  }
  if (alternatives.empty()) // [] or [^\x00-\U0010FFFF]: a rule of no alternative cannot run
    return error("character class matches no character");
  if (alternatives.size() == 1 && alternatives.front().size() == 1)
    return alternatives.front();
  return Sequence{
      {GrammarElement::Kind::kRule, 0, 0, generatedRule("chars", std::move(alternatives))}};
}

Result<Grammar> Parser::parse() {
  while (true) {
    skipSpace(true);
    if (atEnd())
      break;
    KILN_RETURN_IF_ERROR(parseRule());
    skipSpace(false);
    if (!atEnd() && peek() != '\n')
      return error(std::string("unexpected '") + peek() + "'");
  }
  KILN_RETURN_IF_ERROR(checkRules());
  grammar_.root = ruleIds_.at("root");
  return std::move(grammar_);
}

// Rules that can match the empty string, to a fixed point.
std::vector<bool> nullableRules(const Grammar &g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r])
        continue;
      for (const auto &alternative : g.rules[r].alternatives) {
        const bool empty = std::all_of(alternative.begin(), alternative.end(), [&](auto &e) {
          return e.kind == GrammarElement::Kind::kRule && nullable[e.rule];
        });
        if (empty) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// Whether rule `from` reaches `target` at the left edge of one of its alternatives (through
// rules that match the empty string).
bool reachesAtLeftEdge(const Grammar &g, const std::vector<bool> &nullable, uint32_t from,
                       uint32_t target, std::vector<bool> &seen) {
  if (seen[from])
    return false;
  seen[from] = true;
  for (const auto &alternative : g.rules[from].alternatives)
    for (const GrammarElement &e : alternative) {
      if (e.kind != GrammarElement::Kind::kRule)
        break;
      if (e.rule == target || reachesAtLeftEdge(g, nullable, e.rule, target, seen))
        return true;
      if (!nullable[e.rule])
        break;
    }
  return false;
}

} // namespace

Status Parser::checkRules() const {
  for (size_t r = 0; r < grammar_.rules.size(); ++r)
    if (!defined_[r]) {
      Parser at(text_);
      at.pos_ = firstUse_[r];
      return at.error("rule '" + grammar_.rules[r].name + "' is used but not defined");
    }
  if (!ruleIds_.count("root"))
    return invalidArgument("grammar: no rule 'root' (the start rule)");
  const std::vector<bool> nullable = nullableRules(grammar_);
  for (uint32_t r = 0; r < grammar_.rules.size(); ++r) {
    std::vector<bool> seen(grammar_.rules.size(), false);
    if (reachesAtLeftEdge(grammar_, nullable, r, r, seen))
      return invalidArgument("grammar: rule '" + grammar_.rules[r].name +
                             "' is left-recursive (it can reach itself without matching a "
                             "byte); rewrite it with repetition");
  }
  return okStatus();
}

Result<Grammar> parseGrammar(std::string_view text) {
  return Parser(text).parse();
}

std::string Grammar::toString() const {
  auto byteText = [](uint8_t b) {
    static const char *kHex = "0123456789ABCDEF";
    if (b >= 0x21 && b <= 0x7E && b != '[' && b != ']' && b != '\\' && b != '-')
      return std::string(1, char(b));
    return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
  };
  std::string out;
  for (const GrammarRule &rule : rules)
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      out += (a == 0 ? rule.name + " ::=" : std::string(rule.name.size(), ' ') + "  |");
      for (const GrammarElement &e : rule.alternatives[a])
        out += e.kind == GrammarElement::Kind::kRule
                   ? " " + rules[e.rule].name
                   : " [" + byteText(e.lo) + (e.hi != e.lo ? "-" + byteText(e.hi) : "") + "]";
      out += "\n";
    }
  return out;
}

} // namespace kiln::structured
