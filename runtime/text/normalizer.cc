#include "runtime/text/normalizer.h"

#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_json.h"
#include "runtime/text/tokenizer_utf8.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
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

void icuNormalize(const icu::Normalizer2 *(*get)(UErrorCode &), std::string &text) {
  if (isAscii(text))
    return; // every normalization form is the identity on ASCII
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2 *n = get(status);
  if (U_FAILURE(status) || n == nullptr)
    return;
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

} // namespace

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
  Step step{Kind::kPrepend, {}, {}, false, false};
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
  } else if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.left = jsonBoolOr(spec, "strip_left", true);
    step.right = jsonBoolOr(spec, "strip_right", true);
  } else {
    return unimplemented(where + ": normalizer type '" + type + "' is not supported");
  }
  steps.push_back(std::move(step));
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
      icuNormalize(&icu::Normalizer2::getNFCInstance, text);
      break;
    case Kind::kNfd:
      icuNormalize(&icu::Normalizer2::getNFDInstance, text);
      break;
    case Kind::kNfkc:
      icuNormalize(&icu::Normalizer2::getNFKCInstance, text);
      break;
    case Kind::kNfkd:
      icuNormalize(&icu::Normalizer2::getNFKDInstance, text);
      break;
    case Kind::kLowercase: {
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
      u.toLower(icu::Locale::getRoot());
      text.clear();
      u.toUTF8String(text);
      break;
    }
    case Kind::kStrip:
      stripWhitespace(text, s.left, s.right);
      break;
    }
  }
}

} // namespace kiln::rt
