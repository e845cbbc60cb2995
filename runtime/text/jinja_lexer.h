// Tokenizer for the Jinja subset, configured as transformers configures jinja2 for chat templates:
// trim_blocks, lstrip_blocks, `-`/`+` whitespace control, newlines normalized to "\n", one trailing
// newline dropped, {% raw %} blocks passed through as text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace kiln::rt::jinja {

enum class TokenKind {
  kData,          // literal template text
  kVariableBegin, // {{
  kVariableEnd,   // }}
  kBlockBegin,    // {%
  kBlockEnd,      // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text; // data, name, operator, or the unescaped string literal
  int line = 1;
  int64_t intValue = 0;
  double floatValue = 0.0;
};

Result<std::vector<Token>> tokenizeTemplate(std::string_view source);

} // namespace kiln::rt::jinja
