#include "runtime/text/char_classes.h"

#include "runtime/text/tokenizer_utf8.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

namespace kiln::rt::chars {
namespace {

// True when ICU says `c` was assigned by Unicode 8.0, the version of the tables HF reads.
bool inUnicode8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return (age[0] != 0 || age[1] != 0) && (age[0] < 8 || (age[0] == 8 && age[1] == 0));
}

bool hasCategory(char32_t c, uint32_t mask) {
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & mask) != 0 && inUnicode8(c);
}

constexpr uint32_t kPunctuationMask = U_GC_PC_MASK | U_GC_PD_MASK | U_GC_PS_MASK | U_GC_PE_MASK |
                                      U_GC_PI_MASK | U_GC_PF_MASK | U_GC_PO_MASK;

} // namespace

bool isBertPunctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  // Po in Unicode 8.0, since recategorized (So, Mn).
  if (c == 0x166D || c == 0x111C9)
    return true;
  return hasCategory(c, kPunctuationMask);
}

bool isBertRemoved(char32_t c) {
  if (c == 0 || c == 0xFFFD)
    return true;
  if (c == '\t' || c == '\n' || c == '\r')
    return false;
  // Private use is matched by range in unicode_categories, so it needs no age.
  auto cp = static_cast<UChar32>(c);
  if ((U_GET_GC_MASK(cp) & U_GC_CO_MASK) != 0)
    return true;
  return hasCategory(c, U_GC_CC_MASK | U_GC_CF_MASK);
}

bool isBertSpace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || utf8::isWhitespace(c);
}

bool isNonspacingMark(char32_t c) {
  // Mn in Unicode 8.0 but Mc now (U+1734), or Mn now but not then (the other three).
  if (c == 0x1734)
    return true;
  if (c == 0x111C9 || c == 0x1885 || c == 0x1886 || c == 0xA9BD)
    return false;
  return hasCategory(c, U_GC_MN_MASK);
}

bool isCjkIdeograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void appendLowercase(char32_t c, std::string &out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  // One character alone: ICU's root-locale full mapping without neighbours is Rust's mapping.
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toLower(icu::Locale::getRoot());
  u.toUTF8String(out);
}

} // namespace kiln::rt::chars
