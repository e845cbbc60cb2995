#include "runtime/text/decoder.h"

#include "runtime/text/byte_level.h"
#include "runtime/text/normalizer.h"
#include "runtime/text/tokenizer_json.h"

#include <nlohmann/json.hpp>

namespace kiln::rt {
namespace {

// HF ByteFallback: a token spelled exactly "<0xHH>" stands for one byte.
bool parseByteToken(std::string_view t, char &byte) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>')
    return false;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    char c = t[i];
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (d < 0)
      return false;
    value = value * 16 + d;
  }
  byte = static_cast<char>(value);
  return true;
}

// HF decoders/wordpiece.rs cleanup (transformers' clean_up_tokenization plus " do not"), applied
// to each token on its own.
void wordPieceCleanup(std::string &token) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules)
    replaceLiteral(from, to, token);
}

} // namespace

// HF WordPiece decoder: every token but the first loses its continuation prefix or, lacking one,
// gains a leading space.
void Decoder::wordPieceToken(const Step &step, bool first, std::string &token) {
  if (!first) {
    if (token.compare(0, step.text.size(), step.text) == 0)
      token.erase(0, step.text.size());
    else
      token.insert(0, " ");
  }
  if (step.cleanup)
    wordPieceCleanup(token);
}

Status Decoder::addSteps(const nlohmann::json &spec, const std::string &where,
                         std::vector<Step> &steps) {
  if (!spec.is_object())
    return invalidArgument(where + " must be an object or null");
  std::string type = jsonStringOr(spec, "type", "");
  Step step{Kind::kFuse, {}, {}};
  if (type == "Sequence") {
    auto it = spec.find("decoders");
    if (it == spec.end() || !it->is_array())
      return invalidArgument(where + ".decoders must be an array");
    for (size_t i = 0; i < it->size(); ++i)
      KILN_RETURN_IF_ERROR(
          addSteps((*it)[i], where + ".decoders[" + std::to_string(i) + "]", steps));
    return okStatus();
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    KILN_ASSIGN_OR_RETURN(step.text, jsonString(spec, "replacement", where));
    std::string scheme = jsonStringOr(spec, "prepend_scheme", "always");
    if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean() &&
        !spec["add_prefix_space"].get<bool>())
      scheme = "never";
    step.stripFirst = scheme != "never";
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    KILN_ASSIGN_OR_RETURN(step.text, jsonString(spec, "content", where));
    auto pat = spec.find("pattern");
    if (pat != spec.end() && pat->is_object() && pat->contains("String") &&
        (*pat)["String"].is_string()) {
      step.pattern = TextRegex::literal((*pat)["String"].get<std::string>());
    } else if (pat != spec.end() && pat->is_object() && pat->contains("Regex") &&
               (*pat)["Regex"].is_string()) {
      KILN_ASSIGN_OR_RETURN(
          step.pattern, TextRegex::compile((*pat)["Regex"].get<std::string>(), where + ".pattern"));
    } else {
      return invalidArgument(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
  } else if (type == "WordPiece") {
    step.kind = Kind::kWordPiece;
    step.text = jsonStringOr(spec, "prefix", "##");
    step.cleanup = jsonBoolOr(spec, "cleanup", true);
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    KILN_ASSIGN_OR_RETURN(step.text, jsonString(spec, "content", where));
    step.start = jsonIntOr(spec, "start", 0);
    step.stop = jsonIntOr(spec, "stop", 0);
    if (step.start < 0 || step.stop < 0)
      return invalidArgument(where + ": Strip start/stop must be >= 0");
  } else {
    return unimplemented(where + ": decoder type '" + type + "' is not supported");
  }
  steps.push_back(std::move(step));
  return okStatus();
}

Result<Decoder> Decoder::fromJson(const nlohmann::json &spec, const std::string &where) {
  Decoder d;
  if (spec.is_null()) {
    d.steps_.push_back(Step{Kind::kJoinSpaces, {}, {}});
    return d;
  }
  KILN_RETURN_IF_ERROR(addSteps(spec, where, d.steps_));
  return d;
}

Decoder::Stream Decoder::stream() const {
  Stream s;
  s.decoder_ = this;
  s.states_.resize(steps_.size());
  return s;
}

std::string Decoder::decode(const std::vector<std::string_view> &tokens) const {
  Stream s = stream();
  std::string out;
  for (std::string_view t : tokens)
    s.push(t, out);
  s.finish(out);
  return out;
}

std::string Decoder::tokenBytes(std::string_view token) const {
  std::string bytes(token);
  bool fused = false; // after a Fuse, a Strip sees the whole text, not this token
  for (const Step &step : steps_) {
    switch (step.kind) {
    case Kind::kReplace:
      replaceAll(step.pattern, step.text, bytes);
      break;
    case Kind::kMetaspace: {
      std::string text;
      for (size_t i = 0; i < bytes.size();) {
        const bool rep = !step.text.empty() && bytes.compare(i, step.text.size(), step.text) == 0;
        text.push_back(rep ? ' ' : bytes[i]);
        i += rep ? step.text.size() : 1;
      }
      bytes = std::move(text);
      break;
    }
    case Kind::kByteFallback: {
      char byte;
      if (parseByteToken(bytes, byte))
        bytes.assign(1, byte);
      break;
    }
    case Kind::kByteLevel: {
      std::string decoded;
      if (byte_level::decodeChars(bytes, decoded))
        bytes = std::move(decoded);
      break;
    }
    case Kind::kJoinSpaces:
      bytes.insert(0, " ");
      break;
    case Kind::kWordPiece:
      wordPieceToken(step, false, bytes);
      break;
    case Kind::kFuse:
      fused = true;
      break;
    case Kind::kStrip: {
      if (fused)
        break;
      int64_t start = step.start;
      while (start-- > 0 && bytes.compare(0, step.text.size(), step.text) == 0)
        bytes.erase(0, step.text.size());
      break;
    }
    }
  }
  return bytes;
}

void Decoder::Stream::push(std::string_view token, std::string &out) {
  feed(0, token, true, out);
}

void Decoder::Stream::finish(std::string &out) {
  end(0, out);
}

void Decoder::Stream::feed(size_t stage, std::string_view chunk, bool newToken, std::string &out) {
  if (stage == states_.size()) {
    out.append(chunk);
    return;
  }
  const Step &step = decoder_->steps_[stage];
  State &st = states_[stage];
  if (newToken)
    ++st.tokenIndex;
  switch (step.kind) {
  case Kind::kJoinSpaces:
    if (newToken && st.tokenIndex > 0)
      feed(stage + 1, " ", false, out);
    feed(stage + 1, chunk, st.tokenIndex == 0 && newToken, out);
    return;
  case Kind::kReplace: {
    std::string text(chunk);
    replaceAll(step.pattern, step.text, text);
    feed(stage + 1, text, newToken, out);
    return;
  }
  case Kind::kMetaspace:
    feedMetaspace(stage, chunk, newToken, out);
    return;
  case Kind::kByteFallback: {
    char byte;
    if (newToken && parseByteToken(chunk, byte)) {
      st.bytes.push_back(byte);
      return;
    }
    endToken(stage, out); // closes the open byte group
    feed(stage + 1, chunk, newToken, out);
    return;
  }
  case Kind::kFuse:
    feed(stage + 1, chunk, !st.anyOutput, out);
    st.anyOutput = true;
    return;
  case Kind::kStrip:
    feedStrip(stage, chunk, newToken, out);
    return;
  case Kind::kWordPiece:
    feedWordPiece(stage, chunk, newToken, out);
    return;
  case Kind::kByteLevel: {
    std::string bytes;
    if (!byte_level::decodeChars(chunk, bytes))
      bytes.assign(chunk); // HF keeps a token's own bytes when it is not byte-level text
    std::string text;
    st.lossy.feed(bytes, text);
    feed(stage + 1, text, !st.anyOutput, out);
    st.anyOutput = true;
    return;
  }
  }
}

// HF Metaspace decoder: the replacement becomes a space, except in the first token when the
// prepend scheme added it.
void Decoder::Stream::feedMetaspace(size_t stage, std::string_view chunk, bool newToken,
                                    std::string &out) {
  const Step &step = decoder_->steps_[stage];
  State &st = states_[stage];
  std::string text;
  text.reserve(chunk.size());
  const std::string &rep = step.text;
  for (size_t i = 0; i < chunk.size();) {
    if (!rep.empty() && chunk.compare(i, rep.size(), rep) == 0) {
      if (!(st.tokenIndex == 0 && step.stripFirst))
        text.push_back(' ');
      i += rep.size();
    } else {
      text.push_back(chunk[i++]);
    }
  }
  feed(stage + 1, text, newToken, out);
}

// HF Strip: removes up to `start` leading and `stop` trailing `content` characters of each token.
// Trailing candidates are held until the token ends, since more text may follow them.
void Decoder::Stream::feedStrip(size_t stage, std::string_view chunk, bool newToken,
                                std::string &out) {
  const Step &step = decoder_->steps_[stage];
  State &st = states_[stage];
  if (newToken) {
    endToken(stage, out);
    st.startLeft = step.start;
    feed(stage + 1, "", true, out); // keeps token boundaries for later stages
  }
  std::string text;
  for (size_t pos = 0; pos < chunk.size();) {
    size_t begin = pos;
    pos += utf8::seqLength(static_cast<uint8_t>(chunk[pos]));
    std::string_view c = chunk.substr(begin, pos - begin);
    bool isContent = c == step.text;
    if (st.startLeft > 0) {
      if (isContent) {
        --st.startLeft;
        continue;
      }
      st.startLeft = 0;
    }
    if (step.stop > 0 && isContent) {
      st.bytes.append(c); // may be stripped if the token ends here
      continue;
    }
    text.append(st.bytes);
    st.bytes.clear();
    text.append(c);
  }
  if (!text.empty())
    feed(stage + 1, text, false, out);
}

// The WordPiece rewrite needs a whole token. The first stage gets whole tokens from push(), so it
// rewrites at once; a later stage holds the token until the next one starts or the stream ends.
void Decoder::Stream::feedWordPiece(size_t stage, std::string_view chunk, bool newToken,
                                    std::string &out) {
  State &st = states_[stage];
  if (newToken) {
    endToken(stage, out);
    st.heldIndex = st.tokenIndex;
  }
  st.bytes.append(chunk);
  if (stage == 0)
    endToken(stage, out);
}

// Closes the current token of `stage` (ByteFallback group, Strip trailing characters, WordPiece
// token).
void Decoder::Stream::endToken(size_t stage, std::string &out) {
  const Step &step = decoder_->steps_[stage];
  State &st = states_[stage];
  if (step.kind == Kind::kByteFallback && !st.bytes.empty()) {
    std::string group = std::move(st.bytes);
    st.bytes.clear();
    if (utf8::isValid(group)) {
      feed(stage + 1, group, true, out);
    } else {
      for (size_t i = 0; i < group.size(); ++i)
        feed(stage + 1, utf8::kReplacement, true, out);
    }
  } else if (step.kind == Kind::kWordPiece && st.heldIndex >= 0) {
    std::string token = std::move(st.bytes);
    st.bytes.clear();
    wordPieceToken(step, st.heldIndex == 0, token);
    st.heldIndex = -1;
    feed(stage + 1, token, true, out);
  } else if (step.kind == Kind::kStrip && !st.bytes.empty()) {
    std::string held = std::move(st.bytes);
    st.bytes.clear();
    for (int64_t i = 0; i < step.stop && !held.empty(); ++i)
      held.resize(held.size() - step.text.size());
    if (!held.empty())
      feed(stage + 1, held, false, out);
  }
}

void Decoder::Stream::end(size_t stage, std::string &out) {
  if (stage == states_.size())
    return;
  const Step &step = decoder_->steps_[stage];
  State &st = states_[stage];
  if (step.kind == Kind::kByteFallback || step.kind == Kind::kStrip ||
      step.kind == Kind::kWordPiece) {
    endToken(stage, out);
  } else if (step.kind == Kind::kByteLevel) {
    std::string text;
    st.lossy.finish(text);
    if (!text.empty())
      feed(stage + 1, text, !st.anyOutput, out);
  }
  end(stage + 1, out);
}

} // namespace kiln::rt
