// The grammar text (runtime/structured/grammar.h) compiled and run by the byte matcher
// (grammar_matcher.h): accepted and rejected strings for every construct, UTF-8 classes matched
// byte by byte, errors naming line, column and rule, and token masks over a small vocabulary
// whose tokens split a code point.
#include "runtime/structured/grammar.h"
#include "runtime/structured/grammar_matcher.h"
#include "runtime/structured/utf8_ranges.h"

#include <gtest/gtest.h>

namespace kiln::structured {
namespace {

std::shared_ptr<const Grammar> compile(std::string_view text) {
  Result<Grammar> grammar = parseGrammar(text);
  EXPECT_TRUE(grammar.isOk()) << grammar.status().toString();
  if (!grammar.isOk())
    return nullptr;
  return std::make_shared<const Grammar>(std::move(grammar).value());
}

// Whether the whole of `text` is a match of root.
bool matches(const std::shared_ptr<const Grammar> &grammar, std::string_view text) {
  GrammarMatcher matcher(grammar);
  return matcher.acceptBytes(text) && matcher.canEnd();
}

void expectLanguage(std::string_view text, const std::vector<std::string> &accepted,
                    const std::vector<std::string> &rejected) {
  SCOPED_TRACE(std::string(text));
  auto grammar = compile(text);
  ASSERT_NE(grammar, nullptr);
  for (const std::string &s : accepted)
    EXPECT_TRUE(matches(grammar, s)) << "should accept '" << s << "'";
  for (const std::string &s : rejected)
    EXPECT_FALSE(matches(grammar, s)) << "should reject '" << s << "'";
}

TEST(Grammar, LiteralsAlternativesAndGroups) {
  expectLanguage(R"(root ::= "yes" | "no" | "maybe" ("!" | "?"))",
                 {"yes", "no", "maybe!", "maybe?"}, {"", "ye", "yesno", "maybe", "maybe!!"});
  expectLanguage("root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [a-z]+",
                 {"hi bob", "hello x"}, {"hi", "hi Bob", "hey bob"});
}

TEST(Grammar, QuantifiersRepeatExactly) {
  expectLanguage(R"(root ::= "a"* "b"+ "c"?)", {"b", "aab", "bbc", "abbbc"},
                 {"", "a", "ac", "bcc"});
  expectLanguage(R"(root ::= [0-9]{3} "-" [0-9]{2,3} "-" "x"{1,})", {"123-45-x", "123-456-xxx"},
                 {"12-45-x", "123-4-x", "123-4567-x", "123-45-"});
  expectLanguage(R"(root ::= ("ab" "c"?){2})", {"abab", "abcab", "abcabc"}, {"ab", "ababab"});
}

TEST(Grammar, ClassesMatchCodePointsAsUtf8Bytes) {
  // A JSON string body: any code point but " and \, or an escape.
  expectLanguage(R"(root ::= "\"" ([^"\\] | "\\" ["\\nt])* "\"")",
                 {R"("")", R"("a b")", "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", R"("q\"q")"},
                 {R"(")", R"("a"b")", R"("\x")", "\"\xC3\""});
  expectLanguage("root ::= [α-ω]+", {"αβω"}, {"a", "Ω", "\xCE"});
  expectLanguage("root ::= .", {"a", "\xE2\x82\xAC", "\n"}, {"", "ab", "\xED\xA0\x80"});
  expectLanguage(R"(root ::= [\x41-\x43\u00e9] "\U0001F600")",
                 {"A\xF0\x9F\x98\x80", "\xC3\xA9\xF0\x9F\x98\x80"}, {"D\xF0\x9F\x98\x80"});
}

TEST(Grammar, CommentsNewlinesAndContinuationLines) {
  expectLanguage("# a comment\nroot ::= item (\n  \",\" item # inside a group\n)*\n"
                 "  | \"empty\"\nitem ::= [a-c]\n",
                 {"a", "a,b,c", "empty"}, {"a,", ",a"});
}

TEST(Grammar, RecursionThroughABracketedList) {
  expectLanguage(R"(root ::= list
list ::= "[" (value ("," value)*)? "]"
value ::= [0-9] | list)",
                 {"[]", "[1]", "[1,[2,[]],3]"}, {"[", "[1,]", "[[1]", "1"});
}

TEST(Grammar, ErrorsNameWhereAndWhat) {
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"root ::= \"a\" other", "rule 'other' is used but not defined"},
      {"start ::= \"a\"", "no rule 'root'"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= x\nx ::= \"\"? root", "is left-recursive"},
      {"root ::= \"a\nb\"", "grammar line 1, column 12: unterminated literal"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= \"a\" []+", "character class matches no character"},
      {"root ::= [^\\x00-\\U0010FFFF]", "character class matches no character"},
      {"root ::= \"a\"{3,2}", "repetition {3,2}: need m <= n <= 1000"},
      {"root ::= \"\\q\"", "unknown escape '\\q'"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root \"a\"", "expected '::=' after rule name 'root'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "grammar line 2, column 9: rule 'root' is defined twice"},
      {"root ::= \"z\"{2000}", "repetition {2000,2000}: need m <= n <= 1000"},
      {"root ::= \"z\"{20000}", "a repetition count above 1000"},
      {"root ::= " + std::string(1200, '(') + "\"a\"" + std::string(1200, ')'),
       "groups nested deeper than 1000"},
  };
  for (const Case &c : cases) {
    Result<Grammar> grammar = parseGrammar(c.text);
    ASSERT_FALSE(grammar.isOk()) << c.text;
    EXPECT_NE(grammar.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << grammar.status().message();
  }
}

// Repetition multiplies a short text: past about a million elements the grammar is refused
// instead of filling memory (600 x "a"{1000} is 1.2 million).
TEST(Grammar, AGrammarTooLargeToCompileIsAnError) {
  std::string text = "root ::=";
  for (int i = 0; i < 600; ++i)
    text += " \"a\"{1000}";
  Result<Grammar> grammar = parseGrammar(text);
  ASSERT_FALSE(grammar.isOk());
  EXPECT_NE(grammar.status().message().find("compiles to more than 1048576 elements"),
            std::string::npos)
      << grammar.status().message();
  std::string smaller = "root ::=";
  for (int i = 0; i < 200; ++i) // 0.4 million: fine
    smaller += " \"a\"{1000}";
  EXPECT_TRUE(parseGrammar(smaller).isOk());
}

TEST(Grammar, MatcherEndsOnlyOnCompleteText) {
  GrammarMatcher matcher(compile(R"(root ::= "ab" "c"?)"));
  EXPECT_FALSE(matcher.canEnd());
  EXPECT_FALSE(matcher.acceptByte('x')); // refused: nothing changes
  EXPECT_TRUE(matcher.acceptByte('a'));
  EXPECT_FALSE(matcher.canEnd());
  EXPECT_TRUE(matcher.acceptBytes("b"));
  EXPECT_TRUE(matcher.canEnd());
  EXPECT_FALSE(matcher.mustEnd()); // "c" may still come
  EXPECT_FALSE(matcher.acceptBytes("cc"));
  EXPECT_TRUE(matcher.acceptBytes("c"));
  EXPECT_TRUE(matcher.mustEnd());
}

TEST(Grammar, TokenMaskAllowsTokensWhoseBytesAllMatch) {
  // Tokens: "", "a", "ab", "abc", "b", "\xC3" and "\xA9" (halves of "é"), "é", "x", "\"".
  const std::vector<std::string> vocab = {"",     "a",    "ab",       "abc", "b",
                                          "\xC3", "\xA9", "\xC3\xA9", "x",   "\""};
  TokenTrie trie(vocab);
  GrammarMatcher matcher(compile(R"(root ::= "a" "b"* ("é" | "x"))"));
  auto allowedNow = [&] {
    std::vector<int> ids;
    const std::vector<uint8_t> allowed = allowedTokens(matcher, trie);
    for (size_t t = 0; t < allowed.size(); ++t)
      if (allowed[t])
        ids.push_back(static_cast<int>(t));
    return ids;
  };
  EXPECT_EQ(allowedNow(), (std::vector<int>{1, 2})); // "a", "ab"; not "abc", never ""
  ASSERT_TRUE(matcher.acceptBytes("a"));
  EXPECT_EQ(allowedNow(), (std::vector<int>{4, 5, 7, 8})); // "b", "\xC3", "é", "x"
  ASSERT_TRUE(matcher.acceptBytes("\xC3"));
  EXPECT_EQ(allowedNow(), (std::vector<int>{6})); // the code point's second half only
  EXPECT_FALSE(matcher.canEnd());
  ASSERT_TRUE(matcher.acceptBytes("\xA9"));
  EXPECT_TRUE(matcher.canEnd());
  EXPECT_TRUE(allowedNow().empty()); // only the end of sequence is left
}

TEST(Utf8Ranges, ClassesCoverExactlyTheirCodePoints) {
  // [^a] over all of Unicode: every scalar value but 'a' encodes into exactly one sequence.
  const std::vector<ByteRangeSequence> sequences = utf8ByteRanges({{'a', 'a'}}, true);
  auto covered = [&](uint32_t cp) {
    const std::vector<uint8_t> bytes = encodeUtf8(cp);
    int count = 0;
    for (const ByteRangeSequence &s : sequences) {
      bool all = s.size() == bytes.size();
      for (size_t i = 0; all && i < s.size(); ++i)
        all = bytes[i] >= s[i].lo && bytes[i] <= s[i].hi;
      count += all;
    }
    return count;
  };
  for (uint32_t cp = 0; cp <= kMaxCodePoint; cp += (cp < 0x20000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF)
      continue;
    ASSERT_EQ(covered(cp), cp == 'a' ? 0 : 1) << std::hex << cp;
  }
  uint32_t cp = 0;
  EXPECT_EQ(decodeUtf8("\xED\xA0\x80", cp), 0u);     // a surrogate
  EXPECT_EQ(decodeUtf8("\xC0\xAF", cp), 0u);         // overlong
  EXPECT_EQ(decodeUtf8("\xF4\x90\x80\x80", cp), 0u); // past U+10FFFF
  EXPECT_EQ(decodeUtf8("\xF0\x9F\x98\x80", cp), 4u);
  EXPECT_EQ(cp, 0x1F600u);
}

} // namespace
} // namespace kiln::structured
