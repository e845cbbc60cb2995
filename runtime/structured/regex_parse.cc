// Parsing a regex into the syntax tree of runtime/structured/regex_parse.h, and rewriting the
// tree so that no repetition repeats something that can match "".
#include "runtime/structured/regex_parse.h"

#include "runtime/structured/utf8_ranges.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace kiln::structured::regex_internal {
namespace {

constexpr char32_t kFirstSurrogate = 0xD800, kFirstLowSurrogate = 0xDC00, kLastSurrogate = 0xDFFF;
constexpr char32_t kBeforeSurrogates = kFirstSurrogate - 1, kAfterSurrogates = kLastSurrogate + 1;
constexpr int kMaxRepeatCount = 1000; // grammar.h: m <= n <= 1000

bool isSurrogate(char32_t cp) {
  return cp >= kFirstSurrogate && cp <= kLastSurrogate;
}
bool isDigit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool isAlphanumeric(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}
int hexDigitValue(char c) {
  if (!std::isxdigit(static_cast<unsigned char>(c)))
    return -1;
  return isDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
}

const CodePointSet kDigits = {{'0', '9'}};
const CodePointSet kWordChars = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodePointSet kSpaces = {{'\t', '\r'}, {' ', ' '}}; // \t \n \v \f \r and space

CodePointSet normalized(CodePointSet ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodePointSet out;
  for (const auto &[lo, hi] : ranges) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

CodePointSet withoutSurrogates(const CodePointSet &set) {
  CodePointSet out;
  for (const auto &[lo, hi] : set) {
    if (lo < kFirstSurrogate)
      out.push_back({lo, std::min(hi, kBeforeSurrogates)});
    if (hi > kLastSurrogate)
      out.push_back({std::max(lo, kAfterSurrogates), hi});
  }
  return out;
}

} // namespace

const CodePointSet kAllCodePoints = {{0, kBeforeSurrogates}, {kAfterSurrogates, kMaxCodePoint}};

CodePointSet complement(const CodePointSet &set) {
  CodePointSet out;
  char32_t next = 0;
  for (const auto &[lo, hi] : set) {
    if (lo > next)
      out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint)
    out.push_back({next, kMaxCodePoint});
  return withoutSurrogates(out);
}

namespace {

// The set a class escape (\d \w \s, or \D \W \S for their complements) stands for.
std::optional<CodePointSet> classEscapeSet(char letter) {
  const char lower = static_cast<char>(letter | 0x20);
  if (lower != 'd' && lower != 'w' && lower != 's')
    return std::nullopt;
  const CodePointSet &set = lower == 'd' ? kDigits : lower == 'w' ? kWordChars : kSpaces;
  return letter == lower ? set : complement(set);
}

Node makeNode(Node::Kind kind, std::vector<Node> children = {}) {
  Node node;
  node.kind = kind;
  node.children = std::move(children);
  return node;
}

Node literalNode(std::u32string text) {
  Node node;
  node.text = std::move(text);
  return node;
}

Node classNode(CodePointSet set) {
  Node node = makeNode(Node::Kind::kClass);
  node.set = std::move(set);
  return node;
}

// A sequence or alternation of `parts`; a single part stands alone, none is "".
Node compositeNode(Node::Kind kind, std::vector<Node> parts) {
  if (parts.size() <= 1)
    return parts.empty() ? literalNode({}) : std::move(parts[0]);
  return makeNode(kind, std::move(parts));
}

// `item` repeated minCount..maxCount times, simplified where the language allows: x{1} is x,
// x{0} is "", and (x+){m,n} is x{m,} (any count >= m of x splits into m to n non-empty runs).
Node repeatNode(Node item, int minCount, int maxCount) {
  if (maxCount == 0)
    return literalNode({});
  if (minCount == 1 && maxCount == 1)
    return item;
  if (item.kind == Node::Kind::kRepeat && item.minCount == 1 && item.maxCount == kUnbounded) {
    Node inner = std::move(item.children[0]);
    return repeatNode(std::move(inner), minCount, kUnbounded);
  }
  Node node = makeNode(Node::Kind::kRepeat, {std::move(item)});
  node.minCount = minCount;
  node.maxCount = maxCount;
  return node;
}

// Adds `item` to a sequence, merging neighbouring literals into one string.
void appendToSequence(std::vector<Node> &items, Node item) {
  if (item.kind == Node::Kind::kLiteral && item.text.empty())
    return;
  if (item.kind == Node::Kind::kLiteral && !items.empty() &&
      items.back().kind == Node::Kind::kLiteral)
    items.back().text += item.text;
  else
    items.push_back(std::move(item));
}

// ---- Parser ----

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

Status syntaxError(const std::string &construct, size_t offset, const std::string &detail = "") {
  return invalidArgument("regex: " + construct + " at offset " + std::to_string(offset) + detail);
}

Status unsupportedError(const std::string &construct, size_t offset,
                        const std::string &detail = " is not supported") {
  return unimplemented("regex: " + construct + " at offset " + std::to_string(offset) + detail);
}

struct Quantifier {
  int minCount = 0, maxCount = kUnbounded;
  size_t length = 0; // bytes of pattern text
};

// One item of a bracket class: a single code point (which can end a range) or an escape's set.
struct ClassAtom {
  CodePointSet set;
  std::optional<char32_t> single;
};

class RegexParser {
public:
  explicit RegexParser(std::string_view pattern) : pattern_(pattern) {}

  Result<Node> parse() {
    KILN_ASSIGN_OR_RETURN(Node root, parseAlternation(0));
    if (!atEnd()) // only an unmatched ')' stops the top level early
      return syntaxError("unbalanced ')'", pos_);
    return root;
  }

private:
  bool atEnd() const { return pos_ >= pattern_.size(); }
  // The byte at `pos`, or '\0' past the end (callers compare it with non-NUL characters only).
  char charAt(size_t pos) const { return pos < pattern_.size() ? pattern_[pos] : '\0'; }
  std::string_view textFrom(size_t start) const { return pattern_.substr(start, pos_ - start); }

  Result<Node> parseAlternation(int depth) {
    std::vector<Node> branches;
    while (true) {
      KILN_ASSIGN_OR_RETURN(Node branch, parseSequence(depth));
      branches.push_back(std::move(branch));
      if (charAt(pos_) != '|')
        break;
      ++pos_;
    }
    return compositeNode(Node::Kind::kAlternation, std::move(branches));
  }

  // A top-level branch matches the whole output, so ^ at its start and $ at its end always hold.
  Result<Node> parseSequence(int depth) {
    std::vector<Node> items;
    if (depth == 0 && charAt(pos_) == '^')
      ++pos_;
    while (!atEnd() && pattern_[pos_] != '|' && pattern_[pos_] != ')') {
      const char c = pattern_[pos_];
      if (c == '$' && depth == 0 && (pos_ + 1 == pattern_.size() || pattern_[pos_ + 1] == '|')) {
        ++pos_;
        break;
      }
      if (c == '^' || c == '$') {
        return unsupportedError(std::string("anchor '") + c + "'", pos_,
                                c == '^' ? " is only supported at the start of the pattern"
                                         : " is only supported at the end of the pattern");
      }
      KILN_ASSIGN_OR_RETURN(Node atom, parseAtom(depth));
      KILN_ASSIGN_OR_RETURN(Node item, parseQuantifier(std::move(atom)));
      appendToSequence(items, std::move(item));
    }
    return compositeNode(Node::Kind::kSequence, std::move(items));
  }

  Result<Node> parseAtom(int depth) {
    const char c = pattern_[pos_];
    if (c == '(')
      return parseGroup(depth);
    if (c == '[')
      return parseBracketClass();
    if (c == '\\')
      return parseEscape();
    if (c == '.') {
      ++pos_;
      return classNode(complement({{'\n', '\n'}}));
    }
    if (const std::optional<Quantifier> quantifier = quantifierAt(pos_))
      return nothingToRepeat(*quantifier);
    KILN_ASSIGN_OR_RETURN(char32_t cp, takeCodePoint());
    return literalNode(std::u32string(1, cp));
  }

  Status nothingToRepeat(const Quantifier &quantifier) const {
    return syntaxError("quantifier " + quoted(pattern_.substr(pos_, quantifier.length)), pos_,
                       " has nothing to repeat");
  }

  Result<Node> parseQuantifier(Node atom) {
    const size_t start = pos_;
    const std::optional<Quantifier> quantifier = quantifierAt(pos_);
    if (!quantifier)
      return atom;
    const std::string text(pattern_.substr(pos_, quantifier->length));
    pos_ += quantifier->length;
    if (charAt(pos_) == '?') // lazy: the same set of whole matches
      ++pos_;
    if (const std::optional<Quantifier> again = quantifierAt(pos_))
      return nothingToRepeat(*again);
    const int minCount = quantifier->minCount, maxCount = quantifier->maxCount;
    if (maxCount != kUnbounded && minCount > maxCount)
      return syntaxError("repetition " + quoted(text), start, " has min > max");
    if (std::max(minCount, maxCount) > kMaxRepeatCount) {
      return unsupportedError("repetition " + quoted(text), start,
                              " exceeds the grammar's limit of " + std::to_string(kMaxRepeatCount));
    }
    return repeatNode(std::move(atom), minCount, maxCount);
  }

  std::optional<Quantifier> quantifierAt(size_t pos) const {
    const char c = charAt(pos);
    if (c == '{')
      return braceQuantifierAt(pos);
    if (c != '*' && c != '+' && c != '?')
      return std::nullopt;
    return Quantifier{c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded, 1};
  }

  // {m} {m,} {m,n} {,n}; anything else after '{' makes the '{' a literal (as Python does).
  std::optional<Quantifier> braceQuantifierAt(size_t pos) const {
    size_t i = pos + 1;
    const auto number = [&]() -> std::optional<int> {
      if (!isDigit(charAt(i)))
        return std::nullopt;
      int value = 0;
      for (; isDigit(charAt(i)); ++i) // capped: anything above the limit is an error anyway
        value = std::min(value * 10 + (charAt(i) - '0'), 10 * kMaxRepeatCount);
      return value;
    };
    const std::optional<int> low = number();
    Quantifier quantifier{low.value_or(0), low.value_or(0), 0};
    if (charAt(i) == ',') {
      ++i;
      const std::optional<int> high = number();
      if (!low && !high)
        return std::nullopt;
      quantifier.maxCount = high.value_or(kUnbounded);
    } else if (!low) {
      return std::nullopt;
    }
    if (charAt(i) != '}')
      return std::nullopt;
    quantifier.length = i + 1 - pos;
    return quantifier;
  }

  Result<Node> parseGroup(int depth) {
    const size_t open = pos_++;
    // Every pass over the tree recurses: a request must not nest its way to the stack's end.
    constexpr int kMaxGroupDepth = 128;
    if (depth >= kMaxGroupDepth)
      return syntaxError("group", open, " is nested deeper than " + std::to_string(kMaxGroupDepth));
    std::string name;
    if (charAt(pos_) == '?') {
      KILN_ASSIGN_OR_RETURN(name, parseGroupPrefix(open));
    }
    KILN_ASSIGN_OR_RETURN(Node body, parseAlternation(depth + 1));
    if (atEnd())
      return syntaxError("unbalanced '('", open);
    ++pos_; // ')'
    Node group = makeNode(Node::Kind::kGroup, {std::move(body)});
    group.name = std::move(name);
    return group;
  }

  // After "(": "?:" or a named group's "?P<name>" / "?<name>"; returns the name ("" if unnamed).
  Result<std::string> parseGroupPrefix(size_t open) {
    const std::string_view rest = pattern_.substr(pos_);
    for (const std::string_view lookaround : {"?=", "?!", "?<=", "?<!"}) {
      if (rest.starts_with(lookaround))
        return unsupportedError("lookaround '(" + std::string(lookaround) + "'", open);
    }
    if (rest.starts_with("?:")) {
      pos_ += 2;
      return std::string();
    }
    if (rest.starts_with("?P="))
      return unsupportedError("backreference '(?P='", open);
    const size_t prefixLength = rest.starts_with("?P<") ? 3 : rest.starts_with("?<") ? 2 : 0;
    if (prefixLength == 0) // inline flags (?i), comments (?#...), conditionals (?(1)...)
      return unsupportedError("group " + quoted(pattern_.substr(open, 3)), open);
    const size_t nameStart = pos_ + prefixLength;
    const size_t close = std::min(pattern_.find('>', nameStart), pattern_.size());
    const std::string_view name = pattern_.substr(nameStart, close - nameStart);
    const bool validName =
        close < pattern_.size() && !name.empty() && !isDigit(name[0]) &&
        std::all_of(name.begin(), name.end(), [](char c) { return isAlphanumeric(c) || c == '_'; });
    if (!validName)
      return syntaxError("bad group name", nameStart);
    pos_ = close + 1;
    return std::string(name);
  }

  Result<Node> parseEscape() {
    const size_t start = pos_++;
    if (atEnd())
      return syntaxError("trailing '\\'", start);
    const char letter = pattern_[pos_];
    if (std::optional<CodePointSet> set = classEscapeSet(letter)) {
      ++pos_;
      return classNode(std::move(*set));
    }
    if (letter == 'b' || letter == 'B')
      return unsupportedError(std::string("word boundary '\\") + letter + "'", start);
    if (letter == 'k' || (letter >= '1' && letter <= '9')) {
      const size_t close = pattern_.find('>', pos_);
      size_t end = letter == 'k' && close != std::string_view::npos ? close + 1 : pos_ + 1;
      while (letter != 'k' && isDigit(charAt(end)))
        ++end;
      return unsupportedError("backreference " + quoted(pattern_.substr(start, end - start)),
                              start);
    }
    KILN_ASSIGN_OR_RETURN(char32_t cp, parseCharEscape(start));
    return literalNode(std::u32string(1, cp));
  }

  // The code point an escape stands for; pos_ is just past the backslash at `start`.
  Result<char32_t> parseCharEscape(size_t start) {
    static constexpr std::string_view kLetters = "nrtfv", kMeanings = "\n\r\t\f\v";
    const char letter = pattern_[pos_];
    if (const size_t index = kLetters.find(letter); index != std::string_view::npos) {
      ++pos_;
      return static_cast<char32_t>(kMeanings[index]);
    }
    if (letter == 'x' || letter == 'u' || letter == 'U')
      return parseHexEscape(start, letter == 'x' ? 2 : letter == 'u' ? 4 : 8);
    if (letter == '0' && isDigit(charAt(pos_ + 1)))
      return unsupportedError("octal escape " + quoted(pattern_.substr(start, 3)), start);
    if (letter == '0') {
      ++pos_;
      return U'\0';
    }
    if (isAlphanumeric(letter)) // \p{..}, \cX, \A, \Z, ...: another meaning, or none
      return unsupportedError(std::string("escape '\\") + letter + "'", start);
    return takeCodePoint(); // escaped punctuation, space or non-ASCII stands for itself
  }

  // \xHH \uHHHH \UHHHHHHHH: pos_ is at the letter.
  Result<char32_t> parseHexEscape(size_t start, size_t digits) {
    char32_t value = 0;
    for (size_t i = 1; i <= digits; ++i) {
      const int digit = hexDigitValue(charAt(pos_ + i));
      if (digit < 0) {
        return syntaxError("bad escape " + quoted(pattern_.substr(start, pos_ + i + 1 - start)),
                           start, ": expected " + std::to_string(digits) + " hex digits");
      }
      value = value * 16 + static_cast<char32_t>(digit);
    }
    pos_ += digits + 1;
    return combineSurrogates(value, start);
  }

  // A UTF-16 pair written as \uD83D\uDE00 (as JSON-derived patterns have it) is one code point;
  // other surrogates and values past U+10FFFF match nothing UTF-8 can hold.
  Result<char32_t> combineSurrogates(char32_t value, size_t start) {
    if (value >= kFirstSurrogate && value < kFirstLowSurrogate && charAt(pos_) == '\\' &&
        charAt(pos_ + 1) == 'u') {
      char32_t low = 0;
      bool allHex = true;
      for (size_t i = 2; i < 6; ++i) {
        const int digit = hexDigitValue(charAt(pos_ + i));
        allHex = allHex && digit >= 0;
        low = low * 16 + static_cast<char32_t>(std::max(digit, 0));
      }
      if (allHex && low >= kFirstLowSurrogate && low <= kLastSurrogate) {
        pos_ += 6;
        return 0x10000 + ((value - kFirstSurrogate) << 10) + (low - kFirstLowSurrogate);
      }
    }
    if (isSurrogate(value) || value > kMaxCodePoint)
      return syntaxError("escape " + quoted(textFrom(start)), start,
                         " is not a Unicode scalar value");
    return value;
  }

  Result<Node> parseBracketClass() {
    const size_t open = pos_++;
    const bool negated = charAt(pos_) == '^';
    pos_ += negated;
    if (charAt(pos_) == ']') { // ECMAScript reads "[]" as empty, Python as a literal ']'
      return syntaxError("empty class " + quoted(pattern_.substr(open, pos_ + 1 - open)), open,
                         " (write a literal ']' as '\\]')");
    }
    CodePointSet set;
    while (atEnd() || pattern_[pos_] != ']') {
      if (atEnd())
        return syntaxError("unbalanced '['", open);
      KILN_RETURN_IF_ERROR(parseClassItem(set));
    }
    ++pos_;
    set = normalized(std::move(set));
    set = negated ? complement(set) : withoutSurrogates(set);
    if (set.empty())
      return unsupportedError("class " + quoted(textFrom(open)), open, " matches no character");
    return classNode(std::move(set));
  }

  Status parseClassItem(CodePointSet &set) {
    const size_t start = pos_;
    KILN_ASSIGN_OR_RETURN(ClassAtom first, parseClassAtom());
    if (charAt(pos_) != '-' || pos_ + 1 >= pattern_.size() || pattern_[pos_ + 1] == ']') {
      set.insert(set.end(), first.set.begin(), first.set.end());
      return okStatus();
    }
    ++pos_; // '-'
    KILN_ASSIGN_OR_RETURN(ClassAtom last, parseClassAtom());
    if (!first.single || !last.single)
      return syntaxError("bad range " + quoted(textFrom(start)), start);
    if (*first.single > *last.single)
      return syntaxError("range " + quoted(textFrom(start)), start, " is out of order");
    set.push_back({*first.single, *last.single});
    return okStatus();
  }

  Result<ClassAtom> parseClassAtom() {
    char32_t cp = U'\b'; // inside a class \b is backspace, in Python and ECMAScript alike
    if (pattern_[pos_] != '\\') {
      KILN_ASSIGN_OR_RETURN(cp, takeCodePoint());
      return ClassAtom{{{cp, cp}}, cp};
    }
    const size_t start = pos_++;
    if (atEnd())
      return syntaxError("trailing '\\'", start);
    if (std::optional<CodePointSet> set = classEscapeSet(pattern_[pos_])) {
      ++pos_;
      return ClassAtom{std::move(*set), std::nullopt};
    }
    if (pattern_[pos_] == 'b') {
      ++pos_;
    } else {
      KILN_ASSIGN_OR_RETURN(cp, parseCharEscape(start));
    }
    return ClassAtom{{{cp, cp}}, cp};
  }

  Result<char32_t> takeCodePoint() {
    uint32_t cp = 0;
    const size_t length = decodeUtf8(pattern_.substr(pos_), cp); // utf8_ranges.h
    if (length == 0)
      return syntaxError("invalid UTF-8", pos_);
    pos_ += length;
    return static_cast<char32_t>(cp);
  }

  std::string_view pattern_;
  size_t pos_ = 0;
};

// ---- Repetitions of nullable items ----

bool isNullable(const Node &node) {
  const auto &children = node.children;
  switch (node.kind) {
  case Node::Kind::kLiteral:
    return node.text.empty();
  case Node::Kind::kClass:
    return false;
  case Node::Kind::kSequence:
    return std::all_of(children.begin(), children.end(), isNullable);
  case Node::Kind::kAlternation:
    return std::any_of(children.begin(), children.end(), isNullable);
  case Node::Kind::kGroup:
    return isNullable(children[0]);
  case Node::Kind::kRepeat:
    return node.minCount == 0 || isNullable(children[0]);
  }
  return false;
}

std::optional<Node> withoutEmptyString(const Node &node);

// (x y...) minus "": x' (y...) | (y...)' when x is nullable.
std::optional<Node> sequenceWithoutEmptyString(const Node &node) {
  const Node &first = node.children[0];
  if (!isNullable(first))
    return node;
  const std::vector<Node> restParts(node.children.begin() + 1, node.children.end());
  std::vector<Node> branches;
  if (std::optional<Node> firstPart = withoutEmptyString(first)) {
    std::vector<Node> parts;
    appendToSequence(parts, std::move(*firstPart));
    for (const Node &part : restParts)
      appendToSequence(parts, part);
    branches.push_back(compositeNode(Node::Kind::kSequence, std::move(parts)));
  }
  if (std::optional<Node> restPart =
          withoutEmptyString(compositeNode(Node::Kind::kSequence, restParts)))
    branches.push_back(std::move(*restPart));
  if (branches.empty())
    return std::nullopt;
  return compositeNode(Node::Kind::kAlternation, std::move(branches));
}

// The language of `node` minus the empty string, for a node whose repetitions repeat only
// non-nullable items; nullopt when nothing is left. Groups are dropped: a rule named after the
// group would no longer match what the pattern's group did.
std::optional<Node> withoutEmptyString(const Node &node) {
  switch (node.kind) {
  case Node::Kind::kLiteral:
    return node.text.empty() ? std::nullopt : std::optional<Node>(node);
  case Node::Kind::kClass:
    return node;
  case Node::Kind::kGroup:
    return withoutEmptyString(node.children[0]);
  case Node::Kind::kSequence:
    return sequenceWithoutEmptyString(node);
  case Node::Kind::kRepeat: // x{m,n} with x not nullable: x{max(m,1),n}
    return repeatNode(node.children[0], std::max(node.minCount, 1), node.maxCount);
  case Node::Kind::kAlternation:
    break;
  }
  std::vector<Node> branches;
  for (const Node &branch : node.children) {
    if (std::optional<Node> rest = withoutEmptyString(branch))
      branches.push_back(std::move(*rest));
  }
  if (branches.empty())
    return std::nullopt;
  return compositeNode(Node::Kind::kAlternation, std::move(branches));
}

} // namespace

Result<Node> parseRegex(std::string_view pattern) {
  return RegexParser(pattern).parse();
}

Node repeatOnlyNonEmpty(Node node) {
  for (Node &child : node.children)
    child = repeatOnlyNonEmpty(std::move(child));
  if (node.kind != Node::Kind::kRepeat || !isNullable(node.children[0]))
    return node;
  std::optional<Node> nonEmpty = withoutEmptyString(node.children[0]);
  if (!nonEmpty)
    return literalNode({});
  return repeatNode(std::move(*nonEmpty), 0, node.maxCount);
}

} // namespace kiln::structured::regex_internal
