// UTF-8 for the grammar compiler (grammar.cc) and the regex converter (regex_parse.cc,
// regex_grammar.cc): decoding a code point, encoding one, and turning a set of code point ranges
// into the byte-range sequences that match exactly their encodings (so a class like [^"\\] or
// [α-ω] is matched byte by byte, across token boundaries).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::structured {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  uint32_t lo = 0, hi = 0; // inclusive
};
struct ByteRange {
  uint8_t lo = 0, hi = 0; // inclusive
};
using ByteRangeSequence = std::vector<ByteRange>;

// The code point at the start of `text` into `cp`; its length in bytes, 0 when the bytes are not
// well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF included).
size_t decodeUtf8(std::string_view text, uint32_t &cp);
// The UTF-8 bytes of a scalar value (cp <= U+10FFFF, not a surrogate).
std::vector<uint8_t> encodeUtf8(uint32_t cp);
// Byte-range sequences whose union matches exactly the UTF-8 encodings of the code points in
// `ranges` (of their complement in U+0000..U+10FFFF when `negated`); surrogates never match.
// Disjoint, ordered by first byte.
std::vector<ByteRangeSequence> utf8ByteRanges(std::vector<CodePointRange> ranges, bool negated);

} // namespace kiln::structured
