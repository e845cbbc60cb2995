// UTF-8 helpers shared by the tokenizer pieces. Input text is validated once at the API boundary;
// everything below works on byte offsets into valid UTF-8 unless a function says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::rt::utf8 {

// Length of the sequence that starts with lead byte `b` (1 for ASCII and for stray bytes).
inline size_t seqLength(uint8_t b) {
  if (b < 0x80)
    return 1;
  if ((b & 0xE0) == 0xC0)
    return 2;
  if ((b & 0xF0) == 0xE0)
    return 3;
  if ((b & 0xF8) == 0xF0)
    return 4;
  return 1;
}

// Decodes the code point at `pos` of valid UTF-8 and advances `pos`.
char32_t next(std::string_view s, size_t &pos);
void append(std::string &out, char32_t cp);
std::string encode(char32_t cp);

// Byte offset of the first invalid sequence, or npos when `s` is valid UTF-8 (no surrogates,
// no overlongs, nothing above U+10FFFF).
size_t firstInvalid(std::string_view s);
inline bool isValid(std::string_view s) {
  return firstInvalid(s) == std::string_view::npos;
}

// Unicode White_Space, as Rust's char::is_whitespace and the regex `\s` used by HF.
bool isWhitespace(char32_t cp);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

// Streaming lossy UTF-8 decoder with the "maximal subpart" rule of Rust's String::from_utf8_lossy:
// each maximal invalid subsequence becomes one U+FFFD. Bytes of an unfinished sequence are held
// until the next byte decides them, so feeding bytes in any split gives the same text.
class LossyDecoder {
public:
  void feed(std::string_view bytes, std::string &out);
  // Emits U+FFFD for a trailing unfinished sequence and resets.
  void finish(std::string &out);
  bool pending() const { return have_ > 0; }

private:
  void feedByte(uint8_t b, std::string &out);
  uint8_t buf_[4] = {};
  int have_ = 0;
  int need_ = 0;
  uint8_t lo_ = 0x80, hi_ = 0xBF; // allowed range of the next continuation byte
};

} // namespace kiln::rt::utf8
