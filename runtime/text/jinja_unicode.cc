#include "runtime/text/jinja_unicode.h"

#include "runtime/text/tokenizer_utf8.h"

namespace kiln::rt::jinja {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Length of the UTF-8 sequence that starts with `lead`, or 0 when `lead` cannot start one.
int sequenceLength(unsigned char lead) {
  if (lead < 0x80)
    return 1;
  if (lead >= 0xC2 && lead <= 0xDF)
    return 2;
  if (lead >= 0xE0 && lead <= 0xEF)
    return 3;
  if (lead >= 0xF0 && lead <= 0xF4)
    return 4;
  return 0;
}

bool isLineBreak(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

bool isCased(char32_t cp) { return toUpperCp(cp) != cp || toLowerCp(cp) != cp; }

bool isJinjaWordSeparator(char32_t cp) {
  return isPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

} // namespace

std::u32string decodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    int length = sequenceLength(lead);
    if (length == 1) {
      out.push_back(lead);
      ++i;
      continue;
    }
    bool valid = length > 0 && i + length <= text.size();
    char32_t cp = length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (int k = 1; valid && k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (valid && ((length == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
                  (length == 4 && (cp < 0x10000 || cp > 0x10FFFF))))
      valid = false;
    out.push_back(valid ? cp : kReplacement);
    i += valid ? length : 1;
  }
  return out;
}

void appendUtf8(std::string &out, char32_t cp) { utf8::append(out, cp); }

std::string encodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text)
    appendUtf8(out, cp);
  return out;
}

size_t codepointCount(std::string_view text) {
  size_t count = 0;
  for (char c : text)
    count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool isPySpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

char32_t toUpperCp(char32_t cp) {
  if (cp >= 'a' && cp <= 'z')
    return cp - 32;
  if (cp < 0x80)
    return cp;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7))
    return cp - 32;
  if (cp == 0xFF)
    return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    bool oddUpper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x178 || cp == 0x17F)
      return cp == 0x131 ? 'I' : cp == 0x17F ? 'S' : cp;
    if (oddUpper)
      return (cp % 2 == 0) ? cp - 1 : cp;
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if ((cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2))
    return cp - 32;
  if (cp == 0x3C2)
    return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F)
    return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F)
    return cp - 80;
  return cp;
}

char32_t toLowerCp(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z')
    return cp + 32;
  if (cp < 0x80)
    return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)
    return cp + 32;
  if (cp == 0x178)
    return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    bool oddUpper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (cp == 0x130)
      return 'i';
    if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F)
      return cp;
    if (oddUpper)
      return (cp % 2 == 1) ? cp + 1 : cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2)
    return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F)
    return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F)
    return cp + 80;
  return cp;
}

std::string pyStrip(std::string_view text, const std::optional<std::string> &chars, bool left,
                    bool right) {
  std::u32string cps = decodeUtf8(text);
  std::u32string set = chars ? decodeUtf8(*chars) : std::u32string();
  auto strippable = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : isPySpace(cp);
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (left)
    while (begin < end && strippable(cps[begin]))
      ++begin;
  if (right)
    while (end > begin && strippable(cps[end - 1]))
      --end;
  return encodeUtf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> pySplit(std::string_view text, const std::optional<std::string> &sep,
                                 int64_t maxSplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    while (maxSplit < 0 || static_cast<int64_t>(parts.size()) < maxSplit) {
      size_t found = text.find(*sep, start);
      if (found == std::string_view::npos)
        break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  std::u32string cps = decodeUtf8(text);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && isPySpace(cps[i]))
      ++i;
    if (i == cps.size())
      break;
    if (maxSplit >= 0 && static_cast<int64_t>(parts.size()) == maxSplit) {
      size_t end = cps.size();
      while (end > i && isPySpace(cps[end - 1]))
        --end;
      parts.push_back(encodeUtf8(std::u32string_view(cps).substr(i, end - i)));
      break;
    }
    size_t start = i;
    while (i < cps.size() && !isPySpace(cps[i]))
      ++i;
    parts.push_back(encodeUtf8(std::u32string_view(cps).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> pySplitLines(std::string_view text) {
  std::u32string cps = decodeUtf8(text);
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    if (!isLineBreak(cps[i])) {
      ++i;
      continue;
    }
    lines.push_back(encodeUtf8(std::u32string_view(cps).substr(start, i - start)));
    i += (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < cps.size())
    lines.push_back(encodeUtf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string pyUpper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : decodeUtf8(text))
    appendUtf8(out, toUpperCp(cp));
  return out;
}

std::string pyLower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : decodeUtf8(text))
    appendUtf8(out, toLowerCp(cp));
  return out;
}

std::string pyTitle(std::string_view text) {
  std::string out;
  bool previousCased = false;
  for (char32_t cp : decodeUtf8(text)) {
    appendUtf8(out, previousCased ? toLowerCp(cp) : toUpperCp(cp));
    previousCased = isCased(cp);
  }
  return out;
}

std::string pyCapitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (char32_t cp : decodeUtf8(text)) {
    appendUtf8(out, first ? toUpperCp(cp) : toLowerCp(cp));
    first = false;
  }
  return out;
}

std::string jinjaTitle(std::string_view text) {
  std::string out;
  bool wordStart = true;
  for (char32_t cp : decodeUtf8(text)) {
    if (isJinjaWordSeparator(cp)) {
      appendUtf8(out, cp);
      wordStart = true;
      continue;
    }
    appendUtf8(out, wordStart ? toUpperCp(cp) : toLowerCp(cp));
    wordStart = false;
  }
  return out;
}

std::string pyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {
    int64_t done = 0;
    std::u32string cps = decodeUtf8(text);
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      appendUtf8(out, cp);
    }
    if (count < 0 || done < count)
      out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = text.find(from, start);
    if (found == std::string_view::npos)
      break;
    out.append(text.substr(start, found - start));
    out.append(to);
    start = found + from.size();
    ++done;
  }
  out.append(text.substr(start));
  return out;
}

} // namespace kiln::rt::jinja
