// Regular expressions and choice lists as grammar text (the dialect of
// runtime/structured/grammar.h) for structured outputs: vLLM's guided_regex and guided_choice, and
// TGI's {"type": "regex"} grammar. The output is text, so it is read, logged and tested like any
// hand-written grammar, and parseGrammar() is the one place that compiles grammars.
//
// Supported regex syntax (the ECMAScript/Python subset that JSON Schema `pattern` and vLLM use):
//   literal code points (UTF-8); escaped punctuation, space or non-ASCII stands for itself;
//   \n \r \t \f \v \0 \xHH \uHHHH (a \uD8xx\uDCxx pair is one code point) \UHHHHHHHH;
//   \d \w \s and \D \W \S with ASCII meanings (\s = [ \t\n\r\f\v]); `.` = any code point but \n;
//   [...] classes with ranges, a leading ^, escapes, \d \w \s \D \W \S and \b (backspace) inside;
//   ( ) (?: ) (?P<name> ) (?<name> ) as groups; |; * + ? {m} {m,} {m,n} {,n} and their lazy
//   forms (the same language); a `{` that does not start a repetition is a literal.
//   ^ at the start and $ at the end of a top-level alternative are no-ops (the match is whole).
// Errors name the construct and its byte offset: unsupported constructs (backreferences,
// lookarounds, word boundaries, anchors elsewhere, inline flags, \p) are kUnimplemented; syntax
// errors (unbalanced ( ) [, a quantifier with nothing to repeat, {m,n} with m > n, `[]`) are
// kInvalidArgument; counts above grammar.h's 1000 are kUnimplemented.
#pragma once

#include "runtime/base/status.h"

#include <string>
#include <string_view>
#include <vector>

namespace kiln::structured {

// Grammar text whose `root` matches exactly the whole strings that `pattern` matches (a full
// match: guided_regex constrains the entire output). One rule per named group and per group that
// holds an alternation; everything else is inline.
Result<std::string> regexToGrammar(std::string_view pattern);

// As regexToGrammar, but matching the strings as spelled inside a JSON string (JSON Schema's
// `pattern`): '"', '\\' and the controls U+0000..U+001F as their escapes (\" \\ \b \f \n \r \t,
// else \u00XX with upper-case hex), every other code point as itself.
Result<std::string> regexToJsonStringGrammar(std::string_view pattern);

// Grammar text whose `root` matches exactly one of `choices` (UTF-8; duplicates are dropped).
// An empty list is an error: no output could satisfy it.
Result<std::string> choiceGrammar(const std::vector<std::string> &choices);

} // namespace kiln::structured
