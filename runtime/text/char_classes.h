// The character classes of HF tokenizers' BERT components (normalizers/bert.rs,
// pre_tokenizers/bert.rs), which take Unicode categories from the unicode_categories crate: its
// tables are Unicode 8.0, so a class here is ICU's category restricted to characters assigned by
// Unicode 8.0, plus the few characters whose category changed since. The exhaustive check over
// every code point is tests/runtime/text/encoder_tokenizer_test.cc (UnicodeSweep).
#pragma once

#include <string>

namespace kiln::rt::chars {

// BertPreTokenizer splits these off as single pieces: ASCII punctuation and Unicode P*.
bool isBertPunctuation(char32_t c);
// BertNormalizer clean_text removes these: NUL, U+FFFD, and Cc / Cf / Co other than \t \n \r.
bool isBertRemoved(char32_t c);
// BertNormalizer clean_text makes these a plain space: \t \n \r and Unicode White_Space.
bool isBertSpace(char32_t c);
// BertNormalizer strip_accents removes these after NFD: nonspacing marks (Mn).
bool isNonspacingMark(char32_t c);
// BertNormalizer handle_chinese_chars pads these with spaces: the CJK ideograph blocks.
bool isCjkIdeograph(char32_t c);
// Appends the full lowercase mapping of one character (Rust's char::to_lowercase: no context,
// so a final capital sigma becomes σ, not ς).
void appendLowercase(char32_t c, std::string &out);

} // namespace kiln::rt::chars
