// IncrementalDetokenizer: ids fed one at a time must yield exactly Tokenizer::decode of all ids,
// for every corpus case and every family, with and without skip_special_tokens; plus targeted
// cases (byte-fallback groups, split UTF-8 in byte-level BPE, SentencePiece leading space).
#include "runtime/text/detokenizer.h"

#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using nlohmann::json;

std::string streamAll(const Tokenizer &tok, const std::vector<int32_t> &ids, bool skip,
                      std::vector<std::string> *deltas = nullptr) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string d = detok.push(id);
    EXPECT_TRUE(utf8::isValid(d)) << "delta is not valid UTF-8";
    if (deltas)
      deltas->push_back(d);
    all += d;
  }
  std::string rest = detok.finish();
  if (deltas)
    deltas->push_back(rest);
  return all + rest;
}

class DetokenizerCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DetokenizerCorpusTest, StreamingEqualsFullDecode) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  const std::string family = GetParam();
  auto text = readFile(std::string(KILN_TEST_DATA_DIR) + "/tokenizer/goldens_" + family + ".json");
  ASSERT_TRUE(text.isOk());
  json goldens = json::parse(*text);
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  int checked = 0;
  for (const json &c : goldens["cases"]) {
    auto ids = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(streamAll(*tok, ids, false), c["decode_special"].get<std::string>())
        << family << ": " << c["text"];
    EXPECT_EQ(streamAll(*tok, ids, true), c["decode_skip"].get<std::string>())
        << family << ": " << c["text"];
    ++checked;
  }
  EXPECT_GE(checked, 70);
}

INSTANTIATE_TEST_SUITE_P(Families, DetokenizerCorpusTest,
                         ::testing::Values("gpt2", "llama2", "llama3", "llama3.2", "qwen2.5",
                                           "phi3", "mistral", "gemma2", "tinystories",
                                           "stories260k"),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &c : n)
                             if (c == '.')
                               c = '_';
                           return n;
                         });

TEST(DetokenizerTest, ByteLevelHoldsSplitCharacterUntilComplete) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  auto tok = testing::loadFamily("gpt2");
  ASSERT_TRUE(tok.isOk());
  // GPT-2 spells "😀" as two tokens of two bytes each: no delta may carry half of it.
  std::vector<int32_t> ids = tok->encode("a😀b", false);
  ASSERT_EQ(ids.size(), 4u);
  std::vector<std::string> deltas;
  EXPECT_EQ(streamAll(*tok, ids, false, &deltas), "a😀b");
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "", "😀", "b", ""}));
}

TEST(DetokenizerTest, ByteFallbackGroupIsReleasedWhole) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  auto tok = testing::loadFamily("llama2");
  ASSERT_TRUE(tok.isOk());
  // "🦙" is not in the Llama-2 vocab: four <0xXX> byte tokens after "▁".
  std::vector<int32_t> ids = tok->encode("x🦙y", false);
  ASSERT_EQ(ids.size(), 6u);
  std::vector<std::string> deltas;
  EXPECT_EQ(streamAll(*tok, ids, false, &deltas), "x🦙y");
  EXPECT_EQ(tok->decode(ids, false), "x🦙y");
  // The group stays open until a non-byte token arrives (a fifth byte could still make it
  // invalid, which would turn all of it into U+FFFD).
  EXPECT_EQ(deltas, (std::vector<std::string>{"x", "", "", "", "", "🦙y", ""}));
}

TEST(DetokenizerTest, InvalidByteGroupBecomesOneReplacementPerByte) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  auto tok = testing::loadFamily("llama2");
  ASSERT_TRUE(tok.isOk());
  int32_t e4 = tok->tokenToId("<0xE4>"), b8 = tok->tokenToId("<0xB8>"), x = tok->tokenToId("x");
  ASSERT_GE(e4, 0);
  std::vector<int32_t> ids = {x, e4, b8, x};
  // HF ByteFallback: an invalid group gives one U+FFFD per byte.
  EXPECT_EQ(tok->decode(ids, false), "x\xEF\xBF\xBD\xEF\xBF\xBDx");
  EXPECT_EQ(streamAll(*tok, ids, false), tok->decode(ids, false));
}

TEST(DetokenizerTest, SentencePieceLeadingSpaceOnlyStrippedAtStart) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  auto tok = testing::loadFamily("llama2");
  ASSERT_TRUE(tok.isOk());
  std::vector<int32_t> ids = tok->encode("Hello world", true); // <s> ▁Hello ▁world
  std::vector<std::string> deltas;
  EXPECT_EQ(streamAll(*tok, ids, true, &deltas), "Hello world");
  EXPECT_EQ(deltas, (std::vector<std::string>{"", "Hello", " world", ""}));

  // After priming with the prompt, a generated "▁world" keeps its space.
  IncrementalDetokenizer detok(*tok, true);
  detok.prime(std::span<const int32_t>(ids.data(), 2));
  EXPECT_EQ(detok.push(ids[2]), " world");
}

} // namespace
} // namespace kiln::rt
