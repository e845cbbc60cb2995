#include "runtime/text/normalizer.h"

#include "runtime/text/char_classes.h"
#include "runtime/text/precompiled_charsmap.h"
#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_json.h"
#include "runtime/text/tokenizer_utf8.h"

#include <unicode/normalizer2.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

namespace kiln::rt {
namespace {

bool isAscii(std::string_view s) {
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0x80)
      return false;
  return true;
}

// HF's NFC/NFD/NFKC/NFKD (unicode-normalization-alignments) use Unicode 9.0 tables: a character
// assigned later is left as it is and blocks reordering like any starter. ICU restricted to the
// characters of Unicode 9.0 does the same (checked over every code point against HF in
// tests/runtime/text/encoder_tokenizer_test.cc).
const icu::Normalizer2 *unicode9(const icu::Normalizer2 *(*get)(UErrorCode &)) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2 *base = get(status);
  if (U_FAILURE(status) || base == nullptr)
    return nullptr;
  static const icu::UnicodeSet *const kUnicode9 = [] {
    UErrorCode s = U_ZERO_ERROR;
    auto *set = new icu::UnicodeSet(icu::UnicodeString(u"[:Age=9.0:]"), s);
    set->freeze();
    return set;
  }();
  return new icu::FilteredNormalizer2(*base, *kUnicode9);
}

enum class Form { kNfc, kNfd, kNfkc, kNfkd };

void icuNormalize(Form form, std::string &text) {
  if (isAscii(text))
    return; // every normalization form is the identity on ASCII
  static const icu::Normalizer2 *const kForms[] = {
      unicode9(&icu::Normalizer2::getNFCInstance), unicode9(&icu::Normalizer2::getNFDInstance),
      unicode9(&icu::Normalizer2::getNFKCInstance), unicode9(&icu::Normalizer2::getNFKDInstance)};
  const icu::Normalizer2 *n = kForms[static_cast<int>(form)];
  if (n == nullptr)
    return;
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
  if (n->isNormalized(in, status) && U_SUCCESS(status))
    return;
  status = U_ZERO_ERROR;
  icu::UnicodeString out = n->normalize(in, status);
  if (U_FAILURE(status))
    return;
  text.clear();
  out.toUTF8String(text);
}

void stripWhitespace(std::string &text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t pos = begin;
      if (!utf8::isWhitespace(utf8::next(text, pos)))
        break;
      begin = pos;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80)
        --start;
      size_t pos = start;
      if (!utf8::isWhitespace(utf8::next(text, pos)))
        break;
      end = start;
    }
  }
  text = text.substr(begin, end - begin);
}

// HF NormalizedString::lowercase maps each character alone (so no final-sigma rule).
void lowercase(std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();)
    chars::appendLowercase(utf8::next(text, pos), out);
  text = std::move(out);
}

// BertNormalizer clean_text and handle_chinese_chars, one character at a time.
void cleanAndPadChinese(bool clean, bool chinese, std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t c = utf8::next(text, pos);
    if (clean && chars::isBertRemoved(c))
      continue;
    if (clean && chars::isBertSpace(c)) {
      out.push_back(' ');
    } else if (chinese && chars::isCjkIdeograph(c)) {
      out.push_back(' ');
      utf8::append(out, c);
      out.push_back(' ');
    } else {
      utf8::append(out, c);
    }
  }
  text = std::move(out);
}

void removeNonspacingMarks(std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t begin = pos;
    if (!chars::isNonspacingMark(utf8::next(text, pos)))
      out.append(text, begin, pos - begin);
  }
  text = std::move(out);
}

} // namespace

// HF normalizers/bert.rs: clean, pad CJK ideographs, strip accents (NFD, then drop Mn), lowercase,
// in that order.
void Normalizer::applyBert(const BertOptions &options, std::string &text) {
  if (options.cleanText || options.handleChineseChars)
    cleanAndPadChinese(options.cleanText, options.handleChineseChars, text);
  if (options.stripAccents) {
    icuNormalize(Form::kNfd, text);
    removeNonspacingMarks(text);
  }
  if (options.lowercase)
    lowercase(text);
}

void replaceAll(const TextRegex &pattern, std::string_view content, std::string &text) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  ScratchGuard keepMatches(matches);
  matches.clear();
  pattern.findAll(text, matches);
  if (matches.empty())
    return;
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(text, prev, b - prev);
    out.append(content);
    prev = e;
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

void replaceLiteral(std::string_view from, std::string_view to, std::string &text) {
  size_t pos = text.find(from);
  if (from.empty() || pos == std::string::npos)
    return;
  std::string out;
  size_t prev = 0;
  for (; pos != std::string::npos; pos = text.find(from, prev)) {
    out.append(text, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

Status Normalizer::addSteps(const nlohmann::json &spec, const std::string &where,
                            std::vector<Step> &steps) {
  if (spec.is_null())
    return okStatus();
  if (!spec.is_object())
    return invalidArgument(where + " must be an object or null");
  std::string type = jsonStringOr(spec, "type", "");
  if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array())
      return invalidArgument(where + ".normalizers must be an array");
    for (size_t i = 0; i < it->size(); ++i)
      KILN_RETURN_IF_ERROR(
          addSteps((*it)[i], where + ".normalizers[" + std::to_string(i) + "]", steps));
    return okStatus();
  }
  Step step{Kind::kPrepend, {}, {}, false, false, {}, nullptr};
  KILN_RETURN_IF_ERROR(parseStep(spec, type, where, step));
  steps.push_back(std::move(step));
  return okStatus();
}

Status Normalizer::parseStep(const nlohmann::json &spec, const std::string &type,
                             const std::string &where, Step &step) {
  if (type == "Prepend") {
    KILN_ASSIGN_OR_RETURN(step.a, jsonString(spec, "prepend", where));
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    KILN_ASSIGN_OR_RETURN(step.a, jsonString(spec, "content", where));
    auto pat = spec.find("pattern");
    if (pat == spec.end() || !pat->is_object())
      return invalidArgument(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
    if (pat->contains("String") && (*pat)["String"].is_string()) {
      step.pattern = TextRegex::literal((*pat)["String"].get<std::string>());
    } else if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      KILN_ASSIGN_OR_RETURN(
          step.pattern, TextRegex::compile((*pat)["Regex"].get<std::string>(), where + ".pattern"));
    } else {
      return invalidArgument(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC"    ? Kind::kNfc
                : type == "NFD"  ? Kind::kNfd
                : type == "NFKC" ? Kind::kNfkc
                                 : Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.left = jsonBoolOr(spec, "strip_left", true);
    step.right = jsonBoolOr(spec, "strip_right", true);
  } else if (type == "BertNormalizer") {
    step.kind = Kind::kBert;
    step.bert.cleanText = jsonBoolOr(spec, "clean_text", true);
    step.bert.handleChineseChars = jsonBoolOr(spec, "handle_chinese_chars", true);
    step.bert.lowercase = jsonBoolOr(spec, "lowercase", true);
    step.bert.stripAccents = jsonBoolOr(spec, "strip_accents", step.bert.lowercase);
  } else if (type == "Precompiled") {
    step.kind = Kind::kPrecompiled;
    KILN_ASSIGN_OR_RETURN(std::string encoded, jsonString(spec, "precompiled_charsmap", where));
    KILN_ASSIGN_OR_RETURN(
        step.charsMap, PrecompiledCharsMap::fromBase64(encoded, where + ".precompiled_charsmap"));
  } else {
    return unimplemented(where + ": normalizer type '" + type + "' is not supported");
  }
  return okStatus();
}

Result<Normalizer> Normalizer::fromJson(const nlohmann::json &spec, const std::string &where) {
  Normalizer n;
  KILN_RETURN_IF_ERROR(addSteps(spec, where, n.steps_));
  return n;
}

void Normalizer::apply(std::string &text) const {
  for (const Step &s : steps_) {
    switch (s.kind) {
    case Kind::kPrepend:
      if (!text.empty())
        text.insert(0, s.a);
      break;
    case Kind::kReplace:
      replaceAll(s.pattern, s.a, text);
      break;
    case Kind::kNfc:
      icuNormalize(Form::kNfc, text);
      break;
    case Kind::kNfd:
      icuNormalize(Form::kNfd, text);
      break;
    case Kind::kNfkc:
      icuNormalize(Form::kNfkc, text);
      break;
    case Kind::kNfkd:
      icuNormalize(Form::kNfkd, text);
      break;
    case Kind::kLowercase:
      lowercase(text);
      break;
    case Kind::kStrip:
      stripWhitespace(text, s.left, s.right);
      break;
    case Kind::kBert:
      applyBert(s.bert, text);
      break;
    case Kind::kPrecompiled:
      s.charsMap->apply(text);
      break;
    }
  }
}

} // namespace kiln::rt
