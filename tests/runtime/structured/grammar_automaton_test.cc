// The mask cache (runtime/structured/grammar_automaton.h) gives exactly the masks of the matcher's
// own trie walk (grammar_matcher.h allowedTokens) at every step of random walks through a
// JSON-like grammar, with a vocabulary whose tokens span structure, split code points and cross
// rule boundaries; and the grammar cache (grammar_cache.h) compiles a text
// once, returns errors without caching them, and keeps at most its capacity.
#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/grammar_cache.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::structured {
namespace {

constexpr const char *kGrammar = R"(root ::= "{" pair ("," " "? pair)* "}"
pair ::= string ":" " "? value
value ::= string | [0-9]{1,4} | "true" | "false" | "[" (value ("," value)*)? "]"
string ::= "\"" ([^"\\] | "\\" ["\\n])* "\"")";

std::vector<std::string> vocabulary() {
  std::vector<std::string> v = {"",   "{",     "}",   "\"",  ":",    ",",    " ",    "[",
                                "]",  "a",     "b",   "ab",  "\":",  "\", ", "{\"",  "1",
                                "23", "true",  "fal", "se",  "\\",   "n",    "\xC3", "\xA9",
                                "é",  "\"a\"", "],",  "x\"", ", \"", "0",    "9999", "e"};
  return v;
}

TEST(GrammarAutomaton, MasksEqualTheMatchersWalkAlongRandomOutputs) {
  Result<Grammar> parsed = parseGrammar(kGrammar);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  auto grammar = std::make_shared<const Grammar>(std::move(parsed).value());
  auto vocab = std::make_shared<const TokenTrie>(vocabulary());
  GrammarAutomaton automaton(grammar, vocab);
  std::mt19937 rng(7);
  int steps = 0;
  for (int walk = 0; walk < 40; ++walk) {
    GrammarMatcher matcher(grammar);
    for (int step = 0; step < 30 && !matcher.mustEnd(); ++step, ++steps) {
      const std::vector<uint8_t> expected = allowedTokens(matcher, *vocab);
      ASSERT_EQ(automaton.allowedTokens(matcher.stacks()), expected) << "walk " << walk;
      std::vector<int32_t> choices;
      for (size_t t = 0; t < expected.size(); ++t)
        if (expected[t])
          choices.push_back(static_cast<int32_t>(t));
      if (choices.empty())
        break;
      const int32_t token = choices[rng() % choices.size()];
      ASSERT_TRUE(matcher.acceptBytes(vocab->bytesOf(token)));
    }
  }
  EXPECT_GT(steps, 400);
  // Nested arrays make a state per depth; still far below the bound that resets the cache.
  EXPECT_LT(automaton.numStates(), GrammarAutomaton::kMaxStates / 2);
}

TEST(GrammarCache, CompilesOnceAndKeepsItsCapacity) {
  GrammarCache cache(2);
  Result<std::shared_ptr<const Grammar>> a = cache.get(R"(root ::= "a")");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(cache.get(R"(root ::= "a")").value(), *a); // the same compiled grammar
  EXPECT_FALSE(cache.get("root ::= missing").isOk());
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_TRUE(cache.get(R"(root ::= "b")").isOk());
  ASSERT_TRUE(cache.get(R"(root ::= "c")").isOk()); // "a" is the least recently used
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.get(R"(root ::= "a")").value(), *a);
}

} // namespace
} // namespace kiln::structured
