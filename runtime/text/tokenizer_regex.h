// PCRE2 (UTF + UCP + JIT) wrapper for the split patterns of tokenizer.json, which HF runs with
// Oniguruma. Subjects are validated UTF-8, so every match passes PCRE2_NO_UTF_CHECK.
#pragma once

#include "runtime/base/status.h"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

class TextRegex {
public:
  // `where` names the field in errors ("tokenizer.json: pre_tokenizer.pattern.Regex").
  static Result<TextRegex> compile(std::string_view pattern, const std::string &where);
  static TextRegex literal(std::string_view text); // matches `text` exactly (HF String patterns)

  // All non-overlapping matches as byte ranges, left to right. After an empty match the search
  // resumes one character later, as Oniguruma's find_iter does.
  void findAll(std::string_view subject, std::vector<std::pair<size_t, size_t>> &out) const;

private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string literal_; // used instead of code_ for String patterns
};

// Oniguruma's \s also matches U+0085 (NEL); PCRE2's UCP \s does not. Rewrites \s and \S so both
// engines agree. Exposed for tests.
std::string adaptOnigurumaPattern(std::string_view pattern);

} // namespace kiln::rt
