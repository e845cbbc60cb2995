#include "runtime/text/tokenizer_utf8.h"

namespace kiln::rt::utf8 {

char32_t next(std::string_view s, size_t &pos) {
  auto b = static_cast<uint8_t>(s[pos]);
  size_t n = seqLength(b);
  if (pos + n > s.size())
    n = 1;
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

void append(std::string &out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(char32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

size_t firstInvalid(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0)
        lo = 0xA0;
      if (b == 0xED)
        hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0)
        lo = 0x90;
      if (b == 0xF4)
        hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n)
      return i;
    auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b1 < lo || b1 > hi)
      return i;
    for (size_t k = 2; k < len; ++k) {
      auto c = static_cast<uint8_t>(s[i + k]);
      if (c < 0x80 || c > 0xBF)
        return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

bool isWhitespace(char32_t c) {
  if (c <= 0x20)
    return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85)
    return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void LossyDecoder::feed(std::string_view bytes, std::string &out) {
  for (char ch : bytes)
    feedByte(static_cast<uint8_t>(ch), out);
}

void LossyDecoder::feedByte(uint8_t b, std::string &out) {
  if (have_ > 0) {
    if (b >= lo_ && b <= hi_) {
      buf_[have_++] = b;
      lo_ = 0x80;
      hi_ = 0xBF;
      if (have_ == need_) {
        out.append(reinterpret_cast<const char *>(buf_), static_cast<size_t>(have_));
        have_ = 0;
      }
      return;
    }
    // The unfinished sequence is a maximal invalid subpart; `b` starts afresh.
    out.append(kReplacement);
    have_ = 0;
  }
  if (b < 0x80) {
    out.push_back(static_cast<char>(b));
    return;
  }
  lo_ = 0x80;
  hi_ = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need_ = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need_ = 3;
    if (b == 0xE0)
      lo_ = 0xA0;
    if (b == 0xED)
      hi_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need_ = 4;
    if (b == 0xF0)
      lo_ = 0x90;
    if (b == 0xF4)
      hi_ = 0x8F;
  } else {
    out.append(kReplacement);
    return;
  }
  buf_[0] = b;
  have_ = 1;
}

void LossyDecoder::finish(std::string &out) {
  if (have_ > 0)
    out.append(kReplacement);
  have_ = 0;
}

} // namespace kiln::rt::utf8
