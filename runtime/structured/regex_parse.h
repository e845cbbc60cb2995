// The regex half of runtime/structured/regex_grammar.cc: a pattern parsed into a small syntax
// tree, and the rewrite that leaves no repetition repeating something that can match "".
// regex_grammar.cc writes the tree as grammar text. Internal to runtime/structured (the public
// API and the supported syntax are in runtime/structured/regex_grammar.h).
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::structured::regex_internal {

constexpr int kUnbounded = -1; // Node::maxCount of x* x+ x{m,}

// Sorted, disjoint, non-adjacent closed ranges.
using CodePointRange = std::pair<char32_t, char32_t>;
using CodePointSet = std::vector<CodePointRange>;

// Every code point a grammar can match (grammar.h excludes the surrogates).
extern const CodePointSet kAllCodePoints;

// The code points (surrogates excluded) not in `set`, which must be normalized.
CodePointSet complement(const CodePointSet &set);

struct Node {
  enum class Kind : uint8_t { kLiteral, kClass, kSequence, kAlternation, kGroup, kRepeat };
  Kind kind = Kind::kLiteral;
  std::u32string text;            // kLiteral: its code points; empty matches ""
  CodePointSet set;               // kClass: normalized, non-empty, no surrogates
  std::vector<Node> children;     // kSequence, kAlternation: the parts; kGroup, kRepeat: one
  std::string name;               // kGroup: a named group's name, else empty
  int minCount = 0, maxCount = 0; // kRepeat: maxCount may be kUnbounded
};

// The syntax tree of `pattern`; errors as runtime/structured/regex_grammar.h describes them.
Result<Node> parseRegex(std::string_view pattern);

// Rewrites every x{m,n} with a nullable x as (x minus ""){0,n}: the same strings (a nullable x
// can fill any count with empty matches, and dropping those leaves at most n non-empty ones).
// grammar.h rejects left recursion, and `x*` over a nullable x would be one.
Node repeatOnlyNonEmpty(Node node);

} // namespace kiln::structured::regex_internal
