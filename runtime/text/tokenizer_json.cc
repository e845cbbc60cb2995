#include "runtime/text/tokenizer_json.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::json;
using DomParser = nlohmann::detail::json_sax_dom_parser<Json>;

// Forwards every SAX event to nlohmann's DOM builder except the contents of model.vocab (object of
// token -> id) and model.merges (array of "a b" or ["a", "b"]), which would otherwise cost
// hundreds of thousands of small DOM nodes for a 17 MB file.
class Handler {
public:
  Handler(TokenizerJson &out, const std::string &name)
      : out_(out), dom_(out.root, false), name_(name) {}

  bool null() { return capture_ ? fail("unexpected null") : dom_.null(); }
  bool boolean(bool v) { return capture_ ? fail("unexpected boolean") : dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) {
    if (capture_ == Capture::kVocab)
      return addVocab(v);
    if (capture_ == Capture::kScorePair)
      return addScore(static_cast<double>(v));
    return capture_ ? fail("unexpected number") : dom_.number_integer(v);
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    if (capture_ == Capture::kVocab)
      return addVocab(static_cast<int64_t>(v));
    if (capture_ == Capture::kScorePair)
      return addScore(static_cast<double>(v));
    return capture_ ? fail("unexpected number") : dom_.number_unsigned(v);
  }
  bool number_float(Json::number_float_t v, const std::string &s) {
    if (capture_ == Capture::kScorePair)
      return addScore(v);
    return capture_ ? fail("unexpected number") : dom_.number_float(v, s);
  }
  bool string(std::string &v) {
    if (capture_ == Capture::kMerges)
      return addMergeString(v);
    if (capture_ == Capture::kScorePair) {
      if (pairSize_ != 0)
        return fail("model.vocab[" + std::to_string(out_.scoredVocab.size()) +
                    "] must be [token, score]");
      out_.scoredVocab.emplace_back(std::move(v), 0.0);
      ++pairSize_;
      return true;
    }
    if (capture_ == Capture::kMergePair) {
      if (pair_.size() >= 2)
        return fail("merge pair with more than 2 entries");
      pair_.push_back(std::move(v));
      return true;
    }
    return capture_ ? fail("unexpected string") : dom_.string(v);
  }
  bool binary(Json::binary_t &v) { return capture_ ? fail("unexpected binary") : dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (capture_)
      return fail("unexpected object");
    if (isAt("vocab")) {
      capture_ = Capture::kVocab;
      out_.hasVocab = true;
      return true;
    }
    frames_.push_back({true, {}});
    return dom_.start_object(n);
  }
  bool key(std::string &k) {
    if (capture_ == Capture::kVocab) {
      pendingKey_ = std::move(k);
      return true;
    }
    if (capture_)
      return fail("unexpected key");
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    if (capture_ == Capture::kVocab) {
      capture_ = Capture::kNone;
      return true;
    }
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (capture_ == Capture::kMerges) {
      capture_ = Capture::kMergePair;
      pair_.clear();
      return true;
    }
    if (capture_ == Capture::kScoredVocab) {
      capture_ = Capture::kScorePair;
      pairSize_ = 0;
      return true;
    }
    if (capture_)
      return fail("unexpected array");
    if (isAt("merges")) {
      capture_ = Capture::kMerges;
      out_.hasMerges = true;
      return true;
    }
    if (isAt("vocab")) {
      capture_ = Capture::kScoredVocab;
      out_.hasScoredVocab = true;
      return true;
    }
    frames_.push_back({false, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    if (capture_ == Capture::kMergePair) {
      if (pair_.size() != 2)
        return fail("merge pair without 2 entries");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      capture_ = Capture::kMerges;
      return true;
    }
    if (capture_ == Capture::kScorePair) {
      if (pairSize_ != 2)
        return fail("model.vocab[" + std::to_string(out_.scoredVocab.size() - (pairSize_ > 0)) +
                    "] must be [token, score]");
      capture_ = Capture::kScoredVocab;
      return true;
    }
    if (capture_ == Capture::kMerges || capture_ == Capture::kScoredVocab) {
      capture_ = Capture::kNone;
      return true;
    }
    frames_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string &, const nlohmann::detail::exception &e) {
    error_ = name_ + ": invalid JSON at byte " + std::to_string(pos) + ": " + e.what();
    return false;
  }

  const std::string &error() const { return error_; }

private:
  enum Capture { kNone = 0, kVocab, kMerges, kMergePair, kScoredVocab, kScorePair };
  struct Frame {
    bool isObject;
    std::string key;
  };

  // True when the value being opened is root["model"][member].
  bool isAt(const char *member) const {
    return frames_.size() == 2 && frames_[0].isObject && frames_[0].key == "model" &&
           frames_[1].isObject && frames_[1].key == member;
  }
  bool addVocab(int64_t id) {
    out_.vocab.emplace_back(std::move(pendingKey_), id);
    return true;
  }
  bool addScore(double score) {
    if (pairSize_ != 1)
      return fail("model.vocab[" + std::to_string(out_.scoredVocab.size()) +
                  "] must be [token, score]");
    out_.scoredVocab.back().second = score;
    ++pairSize_;
    return true;
  }
  bool addMergeString(const std::string &line) {
    // HF splits on ' ' and requires exactly two parts (models/bpe/serialization.rs).
    size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
      return fail("model.merges[" + std::to_string(out_.merges.size()) + "] '" + line +
                  "' is not a pair 'a b' (exactly one space)");
    }
    out_.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    return true;
  }
  bool fail(const std::string &what) {
    if (error_.empty())
      error_ = name_ + ": " + what;
    return false;
  }

  TokenizerJson &out_;
  DomParser dom_;
  std::string name_;
  std::vector<Frame> frames_;
  Capture capture_ = kNone;
  std::string pendingKey_;
  std::vector<std::string> pair_;
  int pairSize_ = 0; // entries seen of the current [token, score]
  std::string error_;
};

} // namespace

Result<TokenizerJson> parseTokenizerJson(std::string_view text, const std::string &name) {
  TokenizerJson out;
  Handler handler(out, name);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &handler);
  } catch (const std::exception &e) {
    return invalidArgument(name + ": invalid JSON: " + e.what());
  }
  if (!ok || !handler.error().empty()) {
    return invalidArgument(handler.error().empty() ? name + ": invalid JSON" : handler.error());
  }
  if (!out.root.is_object())
    return invalidArgument(name + ": top level is not a JSON object");
  return out;
}

Result<std::string> jsonString(const nlohmann::json &obj, const char *field,
                               const std::string &where) {
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_string())
    return invalidArgument(where + ": field '" + field + "' must be a string");
  return it->get<std::string>();
}

std::string jsonStringOr(const nlohmann::json &obj, const char *field, std::string fallback) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool jsonBoolOr(const nlohmann::json &obj, const char *field, bool fallback) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

int64_t jsonIntOr(const nlohmann::json &obj, const char *field, int64_t fallback) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

} // namespace kiln::rt
