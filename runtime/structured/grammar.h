// The constraint engine's grammar (issue: structured outputs): a context-free grammar over the
// bytes of the model's output, written in a GBNF-style text (llama.cpp's grammar format) and
// compiled into byte-range terminals, so UTF-8 code points split over tokens need no special case.
// JSON schemas (json_schema_grammar.h), regular expressions (regex_grammar.h) and choice lists
// are all compiled to this text; grammar_matcher.h runs it one byte at a time and masks tokens.
//
// The text (every construct below, nothing else):
//   rule      name "::=" alternatives, ending at a newline that is not inside ( ) or [ ] or a
//             literal; names are [a-zA-Z0-9_-]+; the start rule is "root".
//   alternatives  sequence ("|" sequence)*   (an empty sequence matches the empty string)
//   sequence  item*
//   item      primary, optionally followed by one quantifier: "*", "+", "?", "{m}", "{m,}",
//             "{m,n}" (m, n decimal, m <= n <= 1000)
//   primary   "literal"   a string of code points; escapes \" \\ \n \r \t \/ \xHH \uHHHH
//                         \UHHHHHHHH (code points, UTF-8 encoded)
//             [class]     code points: single ones and ranges a-z, negated with a leading ^;
//                         escapes as in literals plus \] \[ \- \^
//             .           any code point
//             name        a rule reference (rules may be referenced before they are defined)
//             ( alternatives )
//   comments  "#" to the end of the line; spaces, tabs and newlines between items are ignored
//             (a newline ends a rule only outside parentheses; the next rule starts with
//             `name ::=`)
// Code points are matched as their UTF-8 bytes (U+0000..U+10FFFF, surrogates excluded). Errors
// name the line and column and what was expected; a rule referenced but not defined, a grammar
// without "root", and left recursion (a rule that can reach itself without consuming a byte,
// which a top-down matcher cannot run) are errors naming the rule.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::structured {

// A compiled grammar: rules of alternatives of elements, every terminal a byte range.
struct GrammarElement {
  enum class Kind : uint8_t {
    kBytes, // one byte in [lo, hi]
    kRule,  // the rule `rule`
  };
  Kind kind = Kind::kBytes;
  uint8_t lo = 0, hi = 0;
  uint32_t rule = 0;
};

struct GrammarRule {
  std::string name;                                      // as written, or generated ("name_3")
  std::vector<std::vector<GrammarElement>> alternatives; // each a sequence; empty: matches ""
};

struct Grammar {
  std::vector<GrammarRule> rules;
  uint32_t root = 0;
  // A readable listing, one alternative per line (tests, `--dump`).
  std::string toString() const;
};

// Parses and compiles the text above. Quantifiers and groups become generated rules; code point
// classes become alternatives of byte-range sequences.
Result<Grammar> parseGrammar(std::string_view text);

} // namespace kiln::structured
