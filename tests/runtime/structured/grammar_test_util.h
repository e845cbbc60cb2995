// Test helper: grammar text (runtime/structured/grammar.h) compiled once by the real parser and
// matched against whole strings by the real matcher (runtime/structured/grammar_matcher.h), for
// the tests of the converters that write such text (JSON schemas, regexes, choice lists).
#pragma once

#include "runtime/structured/grammar.h"
#include "runtime/structured/grammar_matcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::structured {

class CompiledTestGrammar {
public:
  explicit CompiledTestGrammar(std::string_view text) : text_(text) {
    Result<Grammar> grammar = parseGrammar(text);
    if (grammar.isOk())
      grammar_ = std::make_shared<const Grammar>(std::move(grammar).value());
    else
      error_ = grammar.status().toString();
  }

  // Success when the text parsed; the failure shows the error and the text.
  ::testing::AssertionResult parsed() const {
    if (grammar_)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "grammar does not parse: " << error_ << "\n" << text_;
  }

  // Whether the whole of `input` is a match of root (false when the text did not parse).
  bool matches(std::string_view input) const {
    if (!grammar_)
      return false;
    GrammarMatcher matcher(grammar_);
    return matcher.acceptBytes(input) && matcher.canEnd();
  }
  // The whole of `input` is a match; a failure says where the match stopped.
  ::testing::AssertionResult accepts(std::string_view input) const {
    if (!grammar_)
      return parsed();
    if (matches(input))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "rejects '" << input << "': " << whereItStops(input);
  }
  // The whole of `input` is not a match; fails also when the text did not parse.
  ::testing::AssertionResult rejects(std::string_view input) const {
    if (!grammar_)
      return parsed();
    if (!matches(input))
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "accepts '" << input << "'";
  }

private:
  std::string whereItStops(std::string_view input) const {
    GrammarMatcher matcher(grammar_);
    for (size_t i = 0; i < input.size(); ++i)
      if (!matcher.acceptByte(static_cast<uint8_t>(input[i])))
        return "byte " + std::to_string(i) + " is not allowed after '" +
               std::string(input.substr(0, i)) + "'";
    return "the text is incomplete at its end";
  }

  std::string text_;
  std::string error_;
  std::shared_ptr<const Grammar> grammar_;
};

} // namespace kiln::structured
