// Our own corpus (tests/data/tokenizer/corpus.txt: CJK, emoji with ZWJ, code, whitespace runs,
// \r\n, tabs, combining marks, control and private-use characters, long words, special tokens in
// text) against goldens from HF tokenizers 0.22.2 / transformers 4.57.1
// (tools/goldens/make_tokenizer_goldens.py), for every tokenizer family.
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using nlohmann::json;
using testing::joinIds;

json loadGoldens(const std::string &family) {
  auto text = readFile(std::string(KILN_TEST_DATA_DIR) + "/tokenizer/goldens_" + family + ".json");
  return text.isOk() ? json::parse(*text) : json();
}

class TokenizerCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerCorpusTest, MatchesHuggingFaceGoldens) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  const std::string family = GetParam();
  json goldens = loadGoldens(family);
  ASSERT_TRUE(goldens.contains("cases")) << "missing goldens for " << family;
  EXPECT_EQ(goldens["tokenizers_version"].get<std::string>().rfind("0.22.", 0), 0u);
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  ASSERT_GE(goldens["cases"].size(), 70u);
  for (const json &c : goldens["cases"]) {
    std::string text = c["text"].get<std::string>();
    auto ids = c["ids"].get<std::vector<int32_t>>();
    auto idsSpecial = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(joinIds(tok->encode(text, false)), joinIds(ids)) << family << ": '" << text << "'";
    EXPECT_EQ(joinIds(tok->encode(text, true)), joinIds(idsSpecial))
        << family << ": '" << text << "'";
    EXPECT_EQ(tok->decode(ids, false), c["decode_plain"].get<std::string>())
        << family << ": '" << text << "'";
    EXPECT_EQ(tok->decode(idsSpecial, false), c["decode_special"].get<std::string>())
        << family << ": '" << text << "'";
    EXPECT_EQ(tok->decode(idsSpecial, true), c["decode_skip"].get<std::string>())
        << family << ": '" << text << "'";
  }
}

std::string paramName(const ::testing::TestParamInfo<std::string> &info) {
  std::string n = info.param;
  for (char &c : n)
    if (c == '.')
      c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerCorpusTest,
                         ::testing::Values("gpt2", "llama2", "llama3", "llama3.2", "qwen2.5",
                                           "phi3", "mistral", "gemma2", "tinystories",
                                           "stories260k"),
                         paramName);

} // namespace
} // namespace kiln::rt
