#include "runtime/text/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <optional>

#include "runtime/text/jinja_unicode.h"

namespace kiln::rt::jinja {

namespace {

Status syntaxError(int line, const std::string &message) {
  return invalidArgument("chat template syntax error, line " + std::to_string(line) + ": " +
                         message);
}

// jinja2 splits the source on \r\n, \r and \n, rejoins with \n, and drops one trailing newline
// (keep_trailing_newline=False).
std::string normalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

// Byte length of the Python whitespace code point at `pos`, or 0.
size_t spaceAt(const std::string &s, size_t pos) {
  if (pos >= s.size())
    return 0;
  auto lead = static_cast<unsigned char>(s[pos]);
  if (lead < 0x80)
    return isPySpace(lead) ? 1 : 0;
  size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  std::u32string cp = decodeUtf8(std::string_view(s).substr(pos, length));
  return (cp.size() == 1 && isPySpace(cp[0])) ? length : 0;
}

size_t skipSpaces(const std::string &s, size_t pos) {
  while (size_t n = spaceAt(s, pos))
    pos += n;
  return pos;
}

bool isAllSpace(std::string_view text) {
  if (text.empty())
    return false;
  for (char32_t cp : decodeUtf8(text))
    if (!isPySpace(cp))
      return false;
  return true;
}

bool isNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9'); }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
Result<std::string> unescapeString(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
    case '\n':
      break;
    case '\\':
    case '\'':
    case '"':
      out.push_back(e);
      break;
    case 'a':
      out.push_back('\a');
      break;
    case 'b':
      out.push_back('\b');
      break;
    case 'f':
      out.push_back('\f');
      break;
    case 'n':
      out.push_back('\n');
      break;
    case 'r':
      out.push_back('\r');
      break;
    case 't':
      out.push_back('\t');
      break;
    case 'v':
      out.push_back('\v');
      break;
    case 'x':
    case 'u':
    case 'U': {
      size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      char32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        int v = i + 1 + k < body.size() ? hexValue(body[i + 1 + k]) : -1;
        if (v < 0)
          return syntaxError(line, std::string("truncated \\") + e + " escape in string literal");
        cp = cp * 16 + v;
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return syntaxError(line, "string literal escape names an invalid code point");
      appendUtf8(out, cp);
      i += digits;
      break;
    }
    default:
      if (e >= '0' && e <= '7') {
        char32_t cp = e - '0';
        for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
             ++k)
          cp = cp * 8 + (body[++i] - '0');
        appendUtf8(out, cp);
      } else if (e == 'N') {
        return syntaxError(line, "\\N{...} escapes in string literals are not supported");
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
    }
  }
  return out;
}

class Lexer {
public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      size_t start = findTagStart(pos_);
      if (start == std::string::npos) {
        emitData(src_.substr(pos_), line_);
        break;
      }
      KILN_RETURN_IF_ERROR(lexTag(start));
    }
    tokens_.push_back(Token{TokenKind::kEof, "", line_});
    return std::move(tokens_);
  }

private:
  size_t findTagStart(size_t from) const {
    size_t p = src_.find('{', from);
    while (p != std::string::npos && p + 1 < src_.size()) {
      char next = src_[p + 1];
      if (next == '{' || next == '%' || next == '#')
        return p;
      p = src_.find('{', p + 1);
    }
    return std::string::npos;
  }

  void emitData(std::string text, int line) {
    if (!text.empty())
      tokens_.push_back(Token{TokenKind::kData, std::move(text), line});
  }

  void advanceTo(size_t newPos) {
    line_ += static_cast<int>(std::count(src_.begin() + pos_, src_.begin() + newPos, '\n'));
    pos_ = newPos;
  }

  // Text before a tag loses trailing whitespace for `-`, and for lstrip_blocks the spaces that
  // start the tag's line (never for {{ }}, never with `+`).
  std::string stripBeforeTag(std::string text, char sign, bool isVariable) const {
    if (sign == '-')
      return pyStrip(text, std::nullopt, false, true);
    if (sign == '+' || isVariable)
      return text;
    size_t lineStart = text.rfind('\n');
    lineStart = lineStart == std::string::npos ? 0 : lineStart + 1;
    if ((lineStart > 0 || lineStarting_) && isAllSpace(std::string_view(text).substr(lineStart)))
      text.resize(lineStart);
    return text;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})`; returns the position after it, or npos.
  size_t matchRawBegin(size_t start, char sign) const {
    size_t p = skipSpaces(src_, start + 2 + (sign ? 1 : 0));
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && isNameChar(src_[p + 3])))
      return std::string::npos;
    p = skipSpaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0)
      return skipSpaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0)
      return p + 2;
    return std::string::npos;
  }

  // Position after a tag close that starts at `p` (`+%}`, `-%}\s*`, `%}\n?`), for blocks and
  // comments; npos when there is none at `p`.
  size_t matchBlockClose(size_t p, char closer) const {
    std::string plain = std::string(1, closer) + "}";
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-') &&
        src_.compare(p + 1, 2, plain) == 0)
      return src_[p] == '+' ? p + 3 : skipSpaces(src_, p + 3);
    if (src_.compare(p, 2, plain) == 0)
      return (p + 2 < src_.size() && src_[p + 2] == '\n') ? p + 3 : p + 2;
    return std::string::npos;
  }

  void finishTag(size_t after) {
    advanceTo(after);
    lineStarting_ = after > 0 && src_[after - 1] == '\n';
  }

  Status lexTag(size_t start) {
    char type = src_[start + 1];
    char sign = (start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+'))
                    ? src_[start + 2]
                    : 0;
    size_t rawEnd = type == '%' ? matchRawBegin(start, sign) : std::string::npos;
    int textLine = line_;
    std::string text = stripBeforeTag(src_.substr(pos_, start - pos_), sign, type == '{');
    emitData(std::move(text), textLine);
    advanceTo(start);
    lineStarting_ = false;
    if (rawEnd != std::string::npos)
      return lexRaw(rawEnd);
    if (type == '#')
      return lexComment(start + 2 + (sign ? 1 : 0));
    tokens_.push_back(Token{type == '%' ? TokenKind::kBlockBegin : TokenKind::kVariableBegin,
                            type == '%' ? "{%" : "{{", line_});
    advanceTo(start + 2 + (sign ? 1 : 0));
    return lexExpression(type == '%');
  }

  Status lexComment(size_t bodyStart) {
    size_t close = src_.find("#}", bodyStart);
    if (close == std::string::npos)
      return syntaxError(line_, "missing end of comment tag");
    size_t closeStart =
        (close > bodyStart && (src_[close - 1] == '-' || src_[close - 1] == '+')) ? close - 1
                                                                                   : close;
    finishTag(matchBlockClose(closeStart, '#'));
    return okStatus();
  }

  Status lexRaw(size_t bodyStart) {
    size_t search = bodyStart;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string::npos)
        return syntaxError(line_, "missing end of raw directive");
      char sign = (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+'))
                      ? src_[tag + 2]
                      : 0;
      size_t p = skipSpaces(src_, tag + 2 + (sign ? 1 : 0));
      if (src_.compare(p, 6, "endraw") == 0) {
        size_t close = matchBlockClose(skipSpaces(src_, p + 6), '%');
        if (close != std::string::npos) {
          int textLine = line_;
          lineStarting_ = false;
          emitData(stripBeforeTag(src_.substr(bodyStart, tag - bodyStart), sign, false), textLine);
          finishTag(close);
          return okStatus();
        }
      }
      search = tag + 2;
    }
  }

  Status lexExpression(bool isBlock) {
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size())
        return syntaxError(line_, std::string("unexpected end of template, expected '") +
                                      (isBlock ? "%}" : "}}") + "'");
      if (brackets.empty()) {
        size_t close = isBlock ? matchBlockClose(pos_, '%') : matchVariableClose(pos_);
        if (close != std::string::npos) {
          tokens_.push_back(
              Token{isBlock ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", line_});
          finishTag(close);
          return okStatus();
        }
      }
      if (size_t n = spaceAt(src_, pos_)) {
        advanceTo(pos_ + n);
        continue;
      }
      KILN_RETURN_IF_ERROR(lexOneToken(brackets));
    }
  }

  size_t matchVariableClose(size_t p) const {
    if (src_.compare(p, 3, "-}}") == 0)
      return skipSpaces(src_, p + 3);
    if (src_.compare(p, 2, "}}") == 0)
      return p + 2;
    return std::string::npos;
  }

  Status lexOneToken(std::vector<char> &brackets) {
    char c = src_[pos_];
    if (isDigit(c))
      return lexNumber();
    if (isNameStart(c)) {
      size_t end = pos_;
      while (end < src_.size() && isNameChar(src_[end]))
        ++end;
      tokens_.push_back(Token{TokenKind::kName, src_.substr(pos_, end - pos_), line_});
      advanceTo(end);
      return okStatus();
    }
    if (c == '\'' || c == '"')
      return lexString(c);
    return lexOperator(brackets);
  }

  Status lexNumber() {
    size_t p = pos_;
    auto digitRun = [&](size_t q) {
      size_t start = q;
      while (q < src_.size() && (isDigit(src_[q]) || (src_[q] == '_' && q > start)))
        ++q;
      return q;
    };
    p = digitRun(p);
    bool isFloat = false;
    bool afterDot = pos_ > 0 && src_[pos_ - 1] == '.';
    if (!afterDot && p + 1 < src_.size() && src_[p] == '.' && isDigit(src_[p + 1])) {
      p = digitRun(p + 1);
      isFloat = true;
    }
    if (!afterDot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-'))
        ++q;
      if (q < src_.size() && isDigit(src_[q])) {
        p = digitRun(q);
        isFloat = true;
      }
    }
    std::string text = src_.substr(pos_, p - pos_);
    std::string clean;
    std::copy_if(text.begin(), text.end(), std::back_inserter(clean), [](char ch) { return ch != '_'; });
    Token token{isFloat ? TokenKind::kFloat : TokenKind::kInteger, text, line_};
    if (isFloat) {
      token.floatValue = std::strtod(clean.c_str(), nullptr);
    } else {
      errno = 0;
      token.intValue = std::strtoll(clean.c_str(), nullptr, 10);
      if (errno == ERANGE)
        return syntaxError(line_, "integer literal " + text + " does not fit in 64 bits");
    }
    tokens_.push_back(std::move(token));
    advanceTo(p);
    return okStatus();
  }

  Status lexString(char quote) {
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote)
      p += (src_[p] == '\\') ? 2 : 1;
    if (p >= src_.size())
      return syntaxError(line_, "unterminated string literal");
    KILN_ASSIGN_OR_RETURN(std::string value,
                          unescapeString(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1),
                                         line_));
    tokens_.push_back(Token{TokenKind::kString, std::move(value), line_});
    advanceTo(p + 1);
    return okStatus();
  }

  Status lexOperator(std::vector<char> &brackets) {
    static const char *kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char *op : kTwoChar) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::kOperator, op, line_});
        advanceTo(pos_ + 2);
        return okStatus();
      }
    }
    char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}.:,|=<>;").find(c) == std::string_view::npos)
      return syntaxError(line_, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty())
        return syntaxError(line_, std::string("unexpected '") + c + "'");
      if (brackets.back() != c)
        return syntaxError(line_, std::string("unexpected '") + c + "', expected '" +
                                      brackets.back() + "'");
      brackets.pop_back();
    }
    tokens_.push_back(Token{TokenKind::kOperator, std::string(1, c), line_});
    advanceTo(pos_ + 1);
    return okStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool lineStarting_ = true;
  std::vector<Token> tokens_;
};

} // namespace

Result<std::vector<Token>> tokenizeTemplate(std::string_view source) {
  return Lexer(normalizeNewlines(source)).run();
}

} // namespace kiln::rt::jinja
