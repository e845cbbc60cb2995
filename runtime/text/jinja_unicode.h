// Python str semantics over UTF-8 bytes for the Jinja subset: lengths, indices and slices count code
// points; strip/split use Python's Unicode whitespace; case mapping covers ASCII, Latin-1, Latin
// Extended-A, Greek and Cyrillic (other scripts are left unchanged, which Python would map).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt::jinja {

// Invalid UTF-8 bytes decode to U+FFFD, so malformed input cannot crash a slice.
std::u32string decodeUtf8(std::string_view text);
std::string encodeUtf8(std::u32string_view text);
void appendUtf8(std::string &out, char32_t cp);
size_t codepointCount(std::string_view text);

// str.isspace() for one code point.
bool isPySpace(char32_t cp);
char32_t toUpperCp(char32_t cp);
char32_t toLowerCp(char32_t cp);

// str.strip / lstrip / rstrip; `chars` = nullopt strips whitespace.
std::string pyStrip(std::string_view text, const std::optional<std::string> &chars, bool left,
                    bool right);
// str.split(sep, maxsplit); sep = nullopt splits on runs of whitespace. Empty sep is the caller's
// error to report.
std::vector<std::string> pySplit(std::string_view text, const std::optional<std::string> &sep,
                                 int64_t maxSplit);
// str.splitlines() without keepends.
std::vector<std::string> pySplitLines(std::string_view text);
std::string pyUpper(std::string_view text);
std::string pyLower(std::string_view text);
// str.title(): uppercase after any uncased character.
std::string pyTitle(std::string_view text);
// str.capitalize(): first upper, the rest lower.
std::string pyCapitalize(std::string_view text);
// jinja2's `title` filter, which only starts words after whitespace and -([{<.
std::string jinjaTitle(std::string_view text);
// str.replace(old, new, count); count < 0 replaces all. Empty `from` inserts between code points.
std::string pyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count);

} // namespace kiln::rt::jinja
