// Structured outputs in the engine (Request::grammar, runtime/structured/output_constraint.h): a
// fake model that would emit any of its 64 tokens produces, under a grammar, only texts the
// grammar matches in full, at any temperature and seed, for every one of n samples, with the
// device's argmax path bypassed; the end of sequence comes only where the text is complete, and
// a sample ends by itself once nothing but the end can follow.
#include "runtime/engine/engine_core.h"
#include "runtime/structured/grammar_matcher.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;

// The fake model's 64 tokens as text: 1-10 digits, 11-36 letters, then punctuation and a few
// multi-byte tokens (one splits "é"); 0 is the end of sequence, 60-63 special (no bytes).
std::vector<std::string> fakeVocabulary() {
  std::vector<std::string> bytes(64);
  for (int d = 0; d < 10; ++d)
    bytes[1 + d] = std::string(1, char('0' + d));
  for (int c = 0; c < 26; ++c)
    bytes[11 + c] = std::string(1, char('a' + c));
  const char *rest[] = {"{",    "}",        "\"",  ":",  ",", " ", "ab",  "\"a", "12", "\xC3",
                        "\xA9", "\xC3\xA9", "yes", "no", "n", "o", "\":", "{\"", "]",  "["};
  for (size_t i = 0; i < std::size(rest); ++i)
    bytes[37 + i] = rest[i];
  return bytes;
}

std::shared_ptr<const structured::Grammar> grammarOf(std::string_view text) {
  Result<structured::Grammar> g = structured::parseGrammar(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::make_shared<const structured::Grammar>(std::move(g).value());
}

// Whether the sample's tokens (the end of sequence dropped) spell a complete match.
bool spellsAMatch(const std::shared_ptr<const structured::Grammar> &grammar,
                  const std::vector<std::string> &vocab, const std::vector<int32_t> &ids) {
  std::string text;
  for (int32_t id : ids)
    if (id != kEos)
      text += vocab[id];
  structured::GrammarMatcher matcher(grammar);
  return matcher.acceptBytes(text) && matcher.canEnd();
}

TEST(EngineCoreConstraintTest, EverySampleMatchesTheGrammar) {
  const std::vector<std::string> vocab = fakeVocabulary();
  const auto grammar = grammarOf(
      R"(root ::= "{" "\"" [a-z]{1,3} "\"" ":" " "? [0-9]{1,4} ("," " "? [a-zé]{1,8})? "}")");
  for (bool deviceArgmax : {false, true}) {
    FakeRunnerConfig fc = fakeConfig();
    fc.answerArgmax = deviceArgmax;
    FakeRunner runner(fc);
    EngineConfig c = engineConfig(&runner);
    c.vocabulary = std::make_shared<const structured::TokenTrie>(vocab);
    auto core = makeCore(c);
    std::vector<Request> requests;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      Request r =
          makeRequest(rampPrompt(5 + int32_t(seed), 1, 60), seed, seed == 1 ? 0.0f : 1.5f, 40);
      r.sampling.n = seed % 2 ? 1 : 2;
      r.grammar = grammar;
      requests.push_back(r);
    }
    std::map<RequestId, Completion> got = runTogether(*core, requests);
    for (auto &[id, completion] : got) {
      ASSERT_TRUE(completion.finished);
      for (size_t i = 0; i < completion.ids.size(); ++i) {
        std::string text;
        for (int32_t t : completion.ids[i])
          text += t == kEos ? "<eos>" : vocab[t];
        EXPECT_TRUE(spellsAMatch(grammar, vocab, completion.ids[i]))
            << "request " << id << " sample " << i << (deviceArgmax ? " (argmax runner)" : "")
            << ": '" << text << "' " << completion.error.toString();
        EXPECT_EQ(completion.reasons[i], FinishReason::kStop);
      }
    }
  }
}

// A stop id ends the sample whatever it spells (random fixtures' eos may be an ordinary
// character), so it is allowed only where the text is complete, never inside a string.
TEST(EngineCoreConstraintTest, AStopIdThatSpellsACharacterEndsOnlyCompleteTexts) {
  std::vector<std::string> vocab = fakeVocabulary();
  vocab[kEos] = "e";
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = 8.0f; // the model wants to end everywhere
  FakeRunner runner(fc);
  EngineConfig c = engineConfig(&runner);
  c.vocabulary = std::make_shared<const structured::TokenTrie>(vocab);
  auto core = makeCore(c);
  const auto grammar = grammarOf(R"(root ::= "\"" [a-z]{1,5} "\"" ("," [a-z]{1,3})?)");
  std::vector<Request> requests;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Request r = makeRequest(rampPrompt(6, 1, 60), seed, 1.0f, 30);
    r.grammar = grammar;
    requests.push_back(r);
  }
  std::map<RequestId, Completion> got = runTogether(*core, requests);
  for (auto &[id, completion] : got) {
    ASSERT_TRUE(completion.finished);
    const std::vector<int32_t> &ids = completion.ids[0];
    ASSERT_FALSE(ids.empty());
    std::vector<int32_t> content(ids.begin(), ids.end() - (ids.back() == kEos ? 1 : 0));
    std::string text;
    for (int32_t t : content)
      text += vocab[t];
    structured::GrammarMatcher matcher(grammar);
    EXPECT_TRUE(matcher.acceptBytes(text) && matcher.canEnd()) << "request " << id << ": " << text;
  }
}

// Preemption recomputes a sequence's KV cache from its tokens; the constraint's state follows the
// tokens alone, so preempted samples still match.
TEST(EngineCoreConstraintTest, PreemptedSamplesStillMatch) {
  const std::vector<std::string> vocab = fakeVocabulary();
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f;
  FakeRunner runner(fc);
  EngineConfig c = engineConfig(&runner);
  c.vocabulary = std::make_shared<const structured::TokenTrie>(vocab);
  c.numKvBlocks = 24; // 96 tokens of KV for 8 sequences of up to ~40: some are preempted
  auto core = makeCore(c);
  const auto grammar = grammarOf(R"(root ::= "[" [0-9a-z]{20,30} "]")");
  std::vector<Request> requests;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Request r = makeRequest(rampPrompt(8, int32_t(seed), 60), seed, 1.0f, 40);
    r.grammar = grammar;
    requests.push_back(r);
  }
  std::map<RequestId, Completion> got = runTogether(*core, requests);
  EXPECT_GT(core->metrics().snapshot().preemptions, 0u);
  for (auto &[id, completion] : got) {
    ASSERT_TRUE(completion.finished);
    EXPECT_TRUE(spellsAMatch(grammar, vocab, completion.ids[0])) << "request " << id;
  }
}

TEST(EngineCoreConstraintTest, ASampleEndsWhenOnlyTheEndCanFollow) {
  const std::vector<std::string> vocab = fakeVocabulary();
  FakeRunnerConfig fc = fakeConfig();
  fc.eosLogitBoost = -100.0f; // the model never picks the end by itself
  FakeRunner runner(fc);
  EngineConfig c = engineConfig(&runner);
  c.vocabulary = std::make_shared<const structured::TokenTrie>(vocab);
  auto core = makeCore(c);
  Request r = makeRequest(rampPrompt(6, 1, 60), 3, 1.0f, 40);
  r.grammar = grammarOf(R"(root ::= "yes" | "no")");
  std::map<RequestId, Completion> got = runTogether(*core, {r});
  ASSERT_TRUE(got[1].finished);
  EXPECT_TRUE(spellsAMatch(r.grammar, vocab, got[1].ids[0]));
  EXPECT_EQ(got[1].reasons[0], FinishReason::kStop);
  EXPECT_LE(got[1].ids[0].size(), 3u); // "yes" / "no" in one token, or spelled in up to three
}

TEST(EngineCoreConstraintTest, AGrammarNeedsTheVocabulary) {
  FakeRunner runner(fakeConfig());
  auto core = makeCore(engineConfig(&runner)); // no vocabulary
  Request r = makeRequest(rampPrompt(6, 1, 60), 3);
  r.grammar = grammarOf(R"(root ::= "yes")");
  const Status status = core->validate(r);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("structured outputs need the model's tokenizer"),
            std::string::npos);
}

} // namespace
} // namespace kiln::rt
