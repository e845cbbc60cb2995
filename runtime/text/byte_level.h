// GPT-2's reversible byte <-> printable character mapping used by byte-level BPE: every byte maps
// to one code point (printable bytes to themselves, the rest to U+0100 and up).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::rt::byte_level {

// UTF-8 of the character that stands for byte `b`.
std::string_view charFor(uint8_t b);
// The byte a code point stands for, or -1 when the code point is not in the mapping.
int byteFor(char32_t cp);
// Appends the mapped characters of every byte of `bytes` to `out`.
void encodeBytes(std::string_view bytes, std::string &out);
// Converts mapped characters back to bytes. Returns false (leaving `out` untouched) when some
// character is not in the mapping, as HF falls back to the token's own bytes then.
bool decodeChars(std::string_view text, std::string &out);

} // namespace kiln::rt::byte_level
