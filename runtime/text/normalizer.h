// tokenizer.json "normalizer": a chain of string rewrites applied to each piece of input text that
// is not an added token (HF normalizes each piece separately, so Prepend adds its prefix to
// every non-empty piece).
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/tokenizer_regex.h"

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

class PrecompiledCharsMap;

class Normalizer {
public:
  // null JSON gives the identity normalizer. Unsupported types fail, naming the type.
  static Result<Normalizer> fromJson(const nlohmann::json &spec, const std::string &where);

  bool empty() const { return steps_.empty(); }
  void apply(std::string &text) const;

private:
  enum class Kind {
    kPrepend,
    kReplace,
    kNfc,
    kNfd,
    kNfkc,
    kNfkd,
    kLowercase,
    kStrip,
    kBert,
    kPrecompiled
  };
  struct BertOptions {
    bool cleanText = true;
    bool handleChineseChars = true;
    bool stripAccents = true; // tokenizer.json's null means "as lowercase"
    bool lowercase = true;
  };
  struct Step {
    Kind kind;
    std::string a;      // prepend text / replacement content
    TextRegex pattern;  // Replace
    bool left = false;  // Strip
    bool right = false; // Strip
    BertOptions bert;
    std::shared_ptr<const PrecompiledCharsMap> charsMap;
  };
  static Status addSteps(const nlohmann::json &spec, const std::string &where,
                         std::vector<Step> &steps);
  static Status parseStep(const nlohmann::json &spec, const std::string &type,
                          const std::string &where, Step &step);
  static void applyBert(const BertOptions &options, std::string &text);
  std::vector<Step> steps_;
};

// Replaces every non-overlapping match of `pattern` in `text` with `content`.
void replaceAll(const TextRegex &pattern, std::string_view content, std::string &text);
// The same for a literal string `from` (Rust's str::replace), without compiling a pattern.
void replaceLiteral(std::string_view from, std::string_view to, std::string &text);

} // namespace kiln::rt
