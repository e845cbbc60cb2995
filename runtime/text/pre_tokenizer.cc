#include "runtime/text/pre_tokenizer.h"

#include "runtime/text/byte_level.h"
#include "runtime/text/char_classes.h"
#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_json.h"
#include "runtime/text/tokenizer_utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kiln::rt {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Segment {
  size_t begin;
  size_t end;
  bool flag; // is_match before the behavior fold; "remove" after it
};

// HF NormalizedString::split: matches -> alternating segments -> behavior fold.
void splitRanges(size_t length, const std::vector<std::pair<size_t, size_t>> &matches, int behavior,
                 bool invert, std::vector<Segment> &out) {
  thread_local std::vector<Segment> segs;
  ScratchGuard keepSegs(segs);
  segs.clear();
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b)
      segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != length)
    segs.push_back({prev, length, invert});
  out.clear();
  enum { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  switch (behavior) {
  case kIsolated:
    for (auto s : segs)
      out.push_back({s.begin, s.end, false});
    break;
  case kRemoved:
    out = segs;
    break;
  case kContiguous:
  case kMergedWithPrevious: {
    bool previous = false;
    for (auto s : segs) {
      bool merge = behavior == kContiguous ? s.flag == previous : (s.flag && !previous);
      if (merge && !out.empty())
        out.back().end = s.end;
      else
        out.push_back({s.begin, s.end, false});
      previous = s.flag;
    }
    break;
  }
  case kMergedWithNext: {
    bool previous = false;
    for (size_t i = segs.size(); i-- > 0;) {
      Segment s = segs[i];
      if (s.flag && !previous && !out.empty())
        out.back().begin = s.begin;
      else
        out.push_back({s.begin, s.end, false});
      previous = s.flag;
    }
    std::reverse(out.begin(), out.end());
    break;
  }
  }
}

void emitRanges(std::string_view text, size_t base, bool atStart,
                const std::vector<Segment> &ranges, PieceList &out) {
  (void)text;
  for (const Segment &r : ranges) {
    if (r.flag || r.end == r.begin)
      continue;
    out.spans.push_back({static_cast<uint32_t>(base + r.begin), static_cast<uint32_t>(base + r.end),
                         atStart && r.begin == 0});
  }
}

} // namespace

Result<PreTokenizer::Behavior> PreTokenizer::parseBehavior(const nlohmann::json &spec,
                                                           const std::string &where) {
  std::string b = jsonStringOr(spec, "behavior", "");
  if (b == "Removed")
    return Behavior::kRemoved;
  if (b == "Isolated")
    return Behavior::kIsolated;
  if (b == "MergedWithPrevious")
    return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext")
    return Behavior::kMergedWithNext;
  if (b == "Contiguous")
    return Behavior::kContiguous;
  return invalidArgument(where + ".behavior '" + b + "' is not a split behavior");
}

Status PreTokenizer::addSteps(const nlohmann::json &spec, const std::string &where,
                              std::vector<Step> &steps) {
  if (spec.is_null())
    return okStatus();
  if (!spec.is_object())
    return invalidArgument(where + " must be an object or null");
  std::string type = jsonStringOr(spec, "type", "");
  Step step{Kind::kSplit, {}};
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array())
      return invalidArgument(where + ".pretokenizers must be an array");
    for (size_t i = 0; i < it->size(); ++i)
      KILN_RETURN_IF_ERROR(
          addSteps((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]", steps));
    return okStatus();
  } else if (type == "Split") {
    auto pat = spec.find("pattern");
    if (pat != spec.end() && pat->is_object() && pat->contains("String") &&
        (*pat)["String"].is_string()) {
      step.regex = TextRegex::literal((*pat)["String"].get<std::string>());
    } else if (pat != spec.end() && pat->is_object() && pat->contains("Regex") &&
               (*pat)["Regex"].is_string()) {
      KILN_ASSIGN_OR_RETURN(
          step.regex, TextRegex::compile((*pat)["Regex"].get<std::string>(), where + ".pattern"));
    } else {
      return invalidArgument(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
    KILN_ASSIGN_OR_RETURN(step.behavior, parseBehavior(spec, where));
    step.invert = jsonBoolOr(spec, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.addPrefixSpace = jsonBoolOr(spec, "add_prefix_space", true);
    step.useRegex = jsonBoolOr(spec, "use_regex", true);
    KILN_ASSIGN_OR_RETURN(step.regex, TextRegex::compile(kGpt2Pattern, where));
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    KILN_ASSIGN_OR_RETURN(step.replacement, jsonString(spec, "replacement", where));
    std::string scheme = jsonStringOr(spec, "prepend_scheme", "always");
    if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean() &&
        !spec["add_prefix_space"].get<bool>())
      scheme = "never";
    step.prependScheme = scheme == "always"  ? 0
                         : scheme == "first" ? 1
                         : scheme == "never" ? 2
                                             : -1;
    if (step.prependScheme < 0)
      return invalidArgument(where + ".prepend_scheme '" + scheme + "' is not always/first/never");
    step.split = jsonBoolOr(spec, "split", true);
    step.regex = TextRegex::literal(step.replacement);
  } else if (type == "Digits") {
    bool individual = jsonBoolOr(spec, "individual_digits", false);
    KILN_ASSIGN_OR_RETURN(step.regex, TextRegex::compile(individual ? "\\p{N}" : "\\p{N}+", where));
    step.behavior = Behavior::kIsolated;
  } else if (type == "BertPreTokenizer") {
    step.kind = Kind::kBert;
  } else if (type == "WhitespaceSplit") {
    KILN_ASSIGN_OR_RETURN(step.regex, TextRegex::compile("\\s+", where));
    step.behavior = Behavior::kRemoved;
  } else if (type == "Whitespace") {
    KILN_ASSIGN_OR_RETURN(step.regex, TextRegex::compile("\\w+|[^\\w\\s]+", where));
    step.behavior = Behavior::kRemoved;
    step.invert = true;
  } else {
    return unimplemented(where + ": pre_tokenizer type '" + type + "' is not supported");
  }
  steps.push_back(std::move(step));
  return okStatus();
}

Result<PreTokenizer> PreTokenizer::fromJson(const nlohmann::json &spec, const std::string &where) {
  PreTokenizer p;
  KILN_RETURN_IF_ERROR(addSteps(spec, where, p.steps_));
  return p;
}

void PreTokenizer::apply(PieceList &pieces, PieceList &scratch) const {
  for (const Step &step : steps_) {
    scratch.clear();
    switch (step.kind) {
    case Kind::kSplit:
      applySplit(step, pieces, scratch);
      break;
    case Kind::kByteLevel:
      applyByteLevel(step, pieces, scratch);
      break;
    case Kind::kMetaspace:
      applyMetaspace(step, pieces, scratch);
      break;
    case Kind::kBert:
      applyBert(pieces, scratch);
      break;
    }
    std::swap(pieces, scratch);
  }
}

void PreTokenizer::applySplit(const Step &step, const PieceList &in, PieceList &out) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Segment> ranges;
  ScratchGuard keepMatches(matches);
  ScratchGuard keepRanges(ranges);
  out.buffer = in.buffer; // spans keep pointing into the same text
  for (const auto &span : in.spans) {
    std::string_view t = in.text(span);
    matches.clear();
    step.regex.findAll(t, matches);
    splitRanges(t.size(), matches, static_cast<int>(step.behavior), step.invert, ranges);
    emitRanges(t, span.begin, span.atStart, ranges, out);
  }
}

void PreTokenizer::applyByteLevel(const Step &step, const PieceList &in, PieceList &out) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Segment> ranges;
  thread_local std::string text;
  ScratchGuard keepMatches(matches);
  ScratchGuard keepRanges(ranges);
  ScratchGuard keepText(text);
  for (const auto &span : in.spans) {
    text.clear();
    std::string_view t = in.text(span);
    if (step.addPrefixSpace && (t.empty() || t[0] != ' '))
      text.push_back(' ');
    text.append(t);
    ranges.clear();
    if (step.useRegex) {
      matches.clear();
      step.regex.findAll(text, matches);
      splitRanges(text.size(), matches, static_cast<int>(Behavior::kIsolated), false, ranges);
    } else {
      ranges.push_back({0, text.size(), false});
    }
    for (const Segment &r : ranges) {
      if (r.end == r.begin)
        continue;
      auto begin = static_cast<uint32_t>(out.buffer.size());
      byte_level::encodeBytes(std::string_view(text).substr(r.begin, r.end - r.begin), out.buffer);
      out.spans.push_back(
          {begin, static_cast<uint32_t>(out.buffer.size()), span.atStart && r.begin == 0});
    }
  }
}

void PreTokenizer::applyMetaspace(const Step &step, const PieceList &in, PieceList &out) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Segment> ranges;
  thread_local std::string text;
  ScratchGuard keepMatches(matches);
  ScratchGuard keepRanges(ranges);
  ScratchGuard keepText(text);
  const std::string &rep = step.replacement;
  for (const auto &span : in.spans) {
    text.clear();
    std::string_view t = in.text(span);
    for (char c : t) {
      if (c == ' ')
        text.append(rep);
      else
        text.push_back(c);
    }
    bool startsWithRep = text.compare(0, rep.size(), rep) == 0;
    if (!startsWithRep && (step.prependScheme == 0 || (step.prependScheme == 1 && span.atStart)))
      text.insert(0, rep);
    ranges.clear();
    if (step.split) {
      matches.clear();
      step.regex.findAll(text, matches);
      splitRanges(text.size(), matches, static_cast<int>(Behavior::kMergedWithNext), false, ranges);
    } else {
      ranges.push_back({0, text.size(), false});
    }
    auto base = static_cast<uint32_t>(out.buffer.size());
    out.buffer.append(text);
    emitRanges(text, base, span.atStart, ranges, out);
  }
}

// HF pre_tokenizers/bert.rs: whitespace separates pieces and is dropped; every punctuation
// character is a piece of its own.
void PreTokenizer::applyBert(const PieceList &in, PieceList &out) {
  out.buffer = in.buffer; // spans keep pointing into the same text
  for (const auto &span : in.spans) {
    std::string_view t = in.text(span);
    size_t wordBegin = 0;
    auto emit = [&](size_t begin, size_t end) {
      if (end > begin)
        out.spans.push_back({static_cast<uint32_t>(span.begin + begin),
                             static_cast<uint32_t>(span.begin + end), span.atStart && begin == 0});
    };
    for (size_t pos = 0; pos < t.size();) {
      size_t begin = pos;
      char32_t c = utf8::next(t, pos);
      if (utf8::isWhitespace(c)) {
        emit(wordBegin, begin);
        wordBegin = pos;
      } else if (chars::isBertPunctuation(c)) {
        emit(wordBegin, begin);
        emit(begin, pos);
        wordBegin = pos;
      }
    }
    emit(wordBegin, t.size());
  }
}

} // namespace kiln::rt
