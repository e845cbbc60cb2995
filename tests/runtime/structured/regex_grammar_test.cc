// Regexes and choice lists as grammar text (runtime/structured/regex_grammar.h): the exact text
// for small patterns, the errors for what a grammar cannot express, and the language. For the
// language the text is compiled by runtime/structured/grammar.h and run by grammar_matcher.h
// (grammar_test_util.h), with strings each pattern must accept and reject, then whole languages
// compared with std::regex on ASCII patterns.
#include "runtime/structured/regex_grammar.h"
#include "tests/runtime/structured/grammar_test_util.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::structured {
namespace {

std::string grammarOf(std::string_view pattern) {
  const Result<std::string> grammar = regexToGrammar(pattern);
  EXPECT_TRUE(grammar.isOk()) << pattern << ": " << grammar.status().toString();
  return grammar.isOk() ? *grammar : "";
}

TEST(RegexGrammarTest, WritesReadableGrammars) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(\d{3}-\d{4})", "root ::= [0-9]{3} \"-\" [0-9]{4}\n"},
      {"(cat|dog)s?", "root ::= group-1 \"s\"?\ngroup-1 ::= \"cat\" | \"dog\"\n"},
      {R"(^(?P<year>\d{4})-(?:0[1-9]|1[0-2])$)",
       "root ::= year \"-\" group-1\nyear ::= [0-9]{4}\ngroup-1 ::= \"0\" [1-9] | \"1\" [0-2]\n"},
      {"(?<root>a)", "root ::= root-2\nroot-2 ::= \"a\"\n"},
      {"(?:ab)+c", "root ::= \"ab\"+ \"c\"\n"},
      {"[^,]*", "root ::= [^,]*\n"},
      {".", "root ::= [^\\n]\n"},
      {R"([^\d])", "root ::= [^0-9]\n"},
      {R"(\S+)", "root ::= [^\\t-\\r ]+\n"},
      {R"([\w.-]+)", "root ::= [\\-.0-9A-Z_a-z]+\n"},
      {R"([\s\S])", "root ::= .\n"},
      {"", "root ::= \"\"\n"},
      {"yes|no|", "root ::= \"yes\" | \"no\" | \"\"\n"},
      {R"(a"b\\)", "root ::= \"a\\\"b\\\\\"\n"},
      {"x{2,}y{,3}z{0,1}a{", "root ::= \"x\"{2,} \"y\"{0,3} \"z\"? \"a{\"\n"},
      {"é+\\u00e9\\t", "root ::= \"é\"+ \"é\\t\"\n"},
      {R"(\x00\u200b\uD83D\uDE00)", "root ::= \"\\x00\\u200B😀\"\n"},
      // Repetitions never repeat what can match "" (grammar.h rejects left recursion).
      {"(a*)*b", "root ::= \"a\"* \"b\"\n"},
      {"(a|b?)+", "root ::= (\"a\" | \"b\")*\n"},
  };
  for (const auto &[pattern, expected] : cases)
    EXPECT_EQ(grammarOf(pattern), expected) << pattern;
}

TEST(RegexGrammarTest, ErrorsNameTheConstructAndOffset) {
  struct Case {
    std::string pattern;
    StatusCode code;
    std::string message;
  };
  const StatusCode kUnsupported = StatusCode::kUnimplemented;
  const StatusCode kBad = StatusCode::kInvalidArgument;
  const std::vector<Case> cases = {
      {R"((\d)\1)", kUnsupported, R"(backreference '\1' at offset 4 is not supported)"},
      {R"((?<n>a)\k<n>)", kUnsupported, R"(backreference '\k<n>' at offset 7)"},
      {"(?P<n>a)(?P=n)", kUnsupported, "backreference '(?P=' at offset 8"},
      {"a(?=b)", kUnsupported, "lookaround '(?=' at offset 1"},
      {"(?!a)b", kUnsupported, "lookaround '(?!' at offset 0"},
      {std::string(200, '(') + "a" + std::string(200, ')'), kBad,
       "group at offset 128 is nested deeper than 128"},
      {"(?<=a)b", kUnsupported, "lookaround '(?<=' at offset 0"},
      {"b(?<!a)", kUnsupported, "lookaround '(?<!' at offset 1"},
      {R"(\bword)", kUnsupported, R"(word boundary '\b' at offset 0)"},
      {R"(a\B)", kUnsupported, R"(word boundary '\B' at offset 1)"},
      {"a^b", kUnsupported, "anchor '^' at offset 1 is only supported at the start"},
      {"(a$)", kUnsupported, "anchor '$' at offset 2 is only supported at the end"},
      {"(?i)abc", kUnsupported, "group '(?i' at offset 0 is not supported"},
      {R"(\p{L})", kUnsupported, R"(escape '\p' at offset 0 is not supported)"},
      {"a{1,1001}", kUnsupported, "repetition '{1,1001}' at offset 1 exceeds the grammar's limit"},
      {R"([^\s\S])", kUnsupported, R"(class '[^\s\S]' at offset 0 matches no character)"},
      {"(ab", kBad, "unbalanced '(' at offset 0"},
      {"a(b(c)", kBad, "unbalanced '(' at offset 1"},
      {"ab)", kBad, "unbalanced ')' at offset 2"},
      {"a(b[c)", kBad, "unbalanced '[' at offset 3"},
      {"*a", kBad, "quantifier '*' at offset 0 has nothing to repeat"},
      {"a|+b", kBad, "quantifier '+' at offset 2 has nothing to repeat"},
      {"a**", kBad, "quantifier '*' at offset 2 has nothing to repeat"},
      {"(?:{2})", kBad, "quantifier '{2}' at offset 3 has nothing to repeat"},
      {"a{3,2}", kBad, "repetition '{3,2}' at offset 1 has min > max"},
      {"[z-a]", kBad, "range 'z-a' at offset 1 is out of order"},
      {"[]a]", kBad, "empty class '[]' at offset 0"},
      {R"(abc\)", kBad, R"(trailing '\' at offset 3)"},
      {"a\xff", kBad, "invalid UTF-8 at offset 1"},
      {R"(\xZZ)", kBad, R"(bad escape '\xZ' at offset 0)"},
      {R"(x\uD800)", kBad, R"(escape '\uD800' at offset 1 is not a Unicode scalar value)"},
  };
  for (const Case &c : cases) {
    const Result<std::string> grammar = regexToGrammar(c.pattern);
    ASSERT_FALSE(grammar.isOk()) << c.pattern << " gave " << *grammar;
    EXPECT_EQ(grammar.status().code(), c.code) << c.pattern << ": " << grammar.status().message();
    EXPECT_NE(grammar.status().message().find(c.message), std::string::npos)
        << c.pattern << ": " << grammar.status().message();
  }
}

struct LanguageCase {
  std::string pattern;
  std::vector<std::string> accepted, rejected;
};

TEST(RegexGrammarTest, GrammarMatchesWhatThePatternMatches) {
  const std::vector<LanguageCase> cases = {
      {R"(\d{3}-\d{4})",
       {"555-1234", "999-0000"},
       {"5551234", "555-123", "555-12345", "abc-defg", "555-1234\n"}},
      {"(cat|dog)s?", {"cat", "cats", "dog", "dogs"}, {"", "cow", "catss", "catdog", "Cat"}},
      {"[A-Z][a-z]+", {"Hello", "Ab"}, {"hello", "A", "HeLlo", "Hello!", ""}},
      {"[^,]*", {"", "abc def", "é\n"}, {",", "a,b", "abc,"}},
      {"a{2,3}", {"aa", "aaa"}, {"", "a", "aaaa", "ab"}},
      {"(?:ab)+c", {"abc", "ababc"}, {"c", "abac", "abab", "aabc"}},
      {R"([\w.]+@[\w]+\.com)",
       {"john.doe@example.com", "a_1@b.com"},
       {"john@example.org", "@example.com", "a@b-c.com", "a@bxcom", "a b@c.com"}},
      {"é+", {"é", "ééé"}, {"", "e", "éa", "e\u0301"}},
      {R"(^\s*$)", {"", " \t\n\r\f\v"}, {" a ", "\u00a0"}},
      {".", {"a", "é", "😀", "\r"}, {"\n", "", "ab"}},
      {R"([^\d])", {"a", "é", "\n", "😀"}, {"5", "0", "9", "", "ab"}},
      {R"(\D\W\S)", {"a b", "x-y"}, {"1 b", "aab", "a  "}},
      {R"([^\d\s]+)", {"abc", "é-"}, {"a1", "a b", ""}},
      {R"(\uD83D\uDE00|\U0001F600x)", {"😀", "😀x"}, {"", "x", "😀😀"}},
      {"(?P<a>x|y)(?<b>z)?", {"x", "yz"}, {"z", "xy"}},
  };
  for (const LanguageCase &c : cases) {
    const std::string text = grammarOf(c.pattern);
    const CompiledTestGrammar grammar(text);
    EXPECT_TRUE(grammar.parsed()) << c.pattern;
    for (const std::string &input : c.accepted)
      EXPECT_TRUE(grammar.accepts(input)) << c.pattern << " should accept '" << input << "'\n"
                                          << text;
    for (const std::string &input : c.rejected)
      EXPECT_TRUE(grammar.rejects(input)) << c.pattern << " should reject '" << input << "'\n"
                                          << text;
  }
}

// All strings over `alphabet` up to `maxLength` characters.
std::vector<std::string> allStrings(std::string_view alphabet, size_t maxLength) {
  std::vector<std::string> strings = {""};
  for (size_t begin = 0, length = 1; length <= maxLength; ++length) {
    const size_t end = strings.size();
    for (size_t i = begin; i < end; ++i)
      for (const char c : alphabet)
        strings.push_back(strings[i] + c);
    begin = end;
  }
  return strings;
}

// ASCII patterns whose languages std::regex (ECMAScript) also gives; nested and nullable
// repetitions included, since those are rewritten.
TEST(RegexGrammarTest, LanguageEqualsStdRegexOnShortStrings) {
  const std::vector<std::string> patterns = {
      "a*b",         "(a|b)*",       "(a|ab)(0|b0-)?", "[^a]+",       R"(\d+-?\d*)", "(a*)*",
      "(a|b?)+",     "(?:a?b?)*0?",  "a{2,3}",         "a{0,2}b{1,}", "(ab|a)*b",    R"([\w-]+)",
      R"([^\d\s]*)", R"(\D\S?)",     R"(\W*)",         ".*",          "[a-]*",       "(a|)+",
      "()*a",        "a|^b$",        "(?:(a)|b){2}",   "(a+|b)*?",    "[-a0]{1,3}",  "(a?){2,3}b",
      "((a|b)*-)?0", R"([\s\S]{2})", "(?:a*b*)+",      "(a?b?)?0",    "(a+)+b",      "(?:a|b-|)*0",
  };
  const std::vector<std::string> inputs = allStrings("ab09- \n", 4);
  for (const std::string &pattern : patterns) {
    const std::string text = grammarOf(pattern);
    const CompiledTestGrammar grammar(text);
    if (!grammar.parsed()) {
      ADD_FAILURE() << pattern << ": " << grammar.parsed().message();
      continue;
    }
    const std::regex reference(pattern, std::regex::ECMAScript);
    int mismatches = 0;
    for (const std::string &input : inputs) {
      const bool expected = std::regex_match(input, reference);
      if (grammar.matches(input) != expected && ++mismatches <= 3)
        ADD_FAILURE() << pattern << " on '" << input << "': std::regex says " << expected << "\n"
                      << text;
    }
  }
}

TEST(ChoiceGrammarTest, WritesOneLiteralPerChoice) {
  const Result<std::string> grammar = choiceGrammar({"yes", "no", "it's \"quoted\""});
  ASSERT_TRUE(grammar.isOk()) << grammar.status().toString();
  EXPECT_EQ(*grammar, "root ::= \"yes\" | \"no\" | \"it's \\\"quoted\\\"\"\n");
  const CompiledTestGrammar read(*grammar);
  ASSERT_TRUE(read.parsed());
  for (const std::string input : {"yes", "no", "it's \"quoted\""})
    EXPECT_TRUE(read.accepts(input)) << input;
  for (const std::string input : {"", "yes ", "it's quoted", "maybe", "yesno"})
    EXPECT_TRUE(read.rejects(input)) << input;
}

TEST(ChoiceGrammarTest, EscapesBackslashesControlsAndKeepsUnicode) {
  const Result<std::string> grammar =
      choiceGrammar({"C:\\dir", "line\nbreak", "naïve 😀", "", "tab\there", "naïve 😀"});
  ASSERT_TRUE(grammar.isOk()) << grammar.status().toString();
  EXPECT_EQ(*grammar,
            "root ::= \"C:\\\\dir\" | \"line\\nbreak\" | \"naïve 😀\" | \"\" | \"tab\\there\"\n");
  const CompiledTestGrammar read(*grammar);
  ASSERT_TRUE(read.parsed());
  for (const std::string input : {"C:\\dir", "line\nbreak", "naïve 😀", "", "tab\there"})
    EXPECT_TRUE(read.accepts(input)) << input;
  EXPECT_TRUE(read.rejects("C:dir"));
}

TEST(ChoiceGrammarTest, RejectsAnEmptyListAndInvalidUtf8) {
  const Result<std::string> empty = choiceGrammar({});
  ASSERT_FALSE(empty.isOk());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("choice list is empty"), std::string::npos);
  const Result<std::string> invalid = choiceGrammar({"ok", "b\xc3"});
  ASSERT_FALSE(invalid.isOk());
  EXPECT_NE(invalid.status().message().find("choice 1: invalid UTF-8 at offset 1"),
            std::string::npos)
      << invalid.status().message();
}

} // namespace
} // namespace kiln::structured
