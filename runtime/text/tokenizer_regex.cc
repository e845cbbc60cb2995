#include "runtime/text/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kiln::rt {

struct TextRegex::Code {
  pcre2_code *code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

struct MatchData {
  pcre2_match_data *data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data *threadMatchData() {
  thread_local MatchData md;
  return md.data;
}

} // namespace

std::string adaptOnigurumaPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool inClass = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if (n == 's') {
        out += inClass ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S') {
        // Inside a class, \S cannot be widened this way; keep it (no real pattern does this).
        out += inClass ? "\\S" : "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[' && !inClass) {
      inClass = true;
      out += c;
      // A ']' (or '^]') right after '[' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += ']';
        ++i;
      }
      continue;
    }
    if (c == ']' && inClass)
      inClass = false;
    out += c;
  }
  return out;
}

Result<TextRegex> TextRegex::compile(std::string_view pattern, const std::string &where) {
  std::string adapted = adaptOnigurumaPattern(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(adapted.data()), adapted.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return invalidArgument(where + ": regex '" + std::string(pattern) +
                           "' does not compile at offset " + std::to_string(offset) + ": " +
                           reinterpret_cast<char *>(buf));
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  TextRegex r;
  r.code_ = std::move(c);
  return r;
}

TextRegex TextRegex::literal(std::string_view text) {
  TextRegex r;
  r.literal_ = std::string(text);
  return r;
}

void TextRegex::findAll(std::string_view s, std::vector<std::pair<size_t, size_t>> &out) const {
  if (!code_) {
    if (literal_.empty())
      return;
    for (size_t pos = s.find(literal_); pos != std::string_view::npos;
         pos = s.find(literal_, pos + literal_.size()))
      out.emplace_back(pos, pos + literal_.size());
    return;
  }
  pcre2_match_data *md = threadMatchData();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start <= s.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK,
                                          md, nullptr)
                        : pcre2_match(code_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md,
                                      nullptr);
    if (rc < 0)
      break;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= s.size())
        break;
      start = e + 1;
      while (start < s.size() && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80)
        ++start;
    }
  }
}

} // namespace kiln::rt
