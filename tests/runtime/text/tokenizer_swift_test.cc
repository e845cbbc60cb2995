// swift-transformers test data (from the shared assets): per-model cases of tokenizer_tests.json,
// the *_encoded.json long French text, and 83 multilingual inputs with transformers 4.57.1
// baselines. Checks encode (add_special_tokens=True, as those baselines use) and decode with and
// without skip_special_tokens.
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using nlohmann::json;
using testing::assetsDir;
using testing::haveAssets;
using testing::joinIds;

std::string swiftDir() {
  return assetsDir() + "/expected/swift-transformers/";
}

json readJson(const std::string &path) {
  auto text = readFile(path);
  return text.isOk() ? json::parse(*text) : json();
}

std::vector<int32_t> idsOf(const json &a) {
  return a.get<std::vector<int32_t>>();
}

// transformers 4.x decode = tokenizers decode + clean_up_tokenization_spaces when the config
// enables it (gpt2, llama3.2).
std::string hfDecode(const Tokenizer &tok, const std::vector<int32_t> &ids, bool skip) {
  std::string text = tok.decode(ids, skip);
  return tok.cleanUpTokenizationSpacesEnabled() ? cleanUpTokenizationSpaces(text) : text;
}

struct CasesParam {
  const char *model; // key in tokenizer_tests.json
  const char *family;
};

class SwiftCasesTest : public ::testing::TestWithParam<CasesParam> {};

TEST_P(SwiftCasesTest, EncodeAndDecodeMatch) {
  if (!haveAssets())
    GTEST_SKIP() << "shared assets not found at " << assetsDir();
  auto [model, family] = GetParam();
  json all = readJson(swiftDir() + "tokenizer_tests.json");
  ASSERT_TRUE(all.contains(model));
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  for (const json &c : all[model]) {
    std::string input = c["input"].get<std::string>();
    std::vector<int32_t> want = idsOf(c["encoded"]["input_ids"]);
    std::vector<int32_t> got = tok->encode(input, true);
    EXPECT_EQ(joinIds(got), joinIds(want)) << model << " input '" << input << "'";
    EXPECT_EQ(hfDecode(*tok, want, true), c["decoded_without_special"].get<std::string>())
        << model << " '" << input << "'";
    EXPECT_EQ(hfDecode(*tok, want, false), c["decoded_with_special"].get<std::string>())
        << model << " '" << input << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, SwiftCasesTest,
    ::testing::Values(CasesParam{"distilgpt2", "gpt2"},
                      CasesParam{"coreml-projects/Llama-2-7b-chat-coreml", "llama2"},
                      CasesParam{"pcuenq/gemma-tokenizer", "gemma2"},
                      CasesParam{"pcuenq/Llama-3.2-1B-Instruct-tokenizer", "llama3.2"}),
    [](const auto &info) {
      return std::string(info.param.family == std::string("llama3.2") ? "llama3_2"
                                                                      : info.param.family);
    });

struct EncodedParam {
  const char *file;
  const char *family;
};

class SwiftEncodedTest : public ::testing::TestWithParam<EncodedParam> {};

TEST_P(SwiftEncodedTest, LongTextIdsAndDecode) {
  if (!haveAssets())
    GTEST_SKIP() << "shared assets not found at " << assetsDir();
  auto [file, family] = GetParam();
  json j = readJson(swiftDir() + file);
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  std::vector<int32_t> want = idsOf(j["token_ids"]);
  EXPECT_EQ(joinIds(tok->encode(j["text"].get<std::string>(), true)), joinIds(want));
  if (j.contains("decoded_text"))
    EXPECT_EQ(hfDecode(*tok, want, false), j["decoded_text"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Files, SwiftEncodedTest,
                         ::testing::Values(EncodedParam{"gpt2_encoded_tokens.json", "gpt2"},
                                           EncodedParam{"llama_encoded.json", "llama2"},
                                           EncodedParam{"llama_3.2_encoded.json", "llama3.2"},
                                           EncodedParam{"gemma_encoded.json", "gemma2"}),
                         [](const auto &info) {
                           std::string n = info.param.family;
                           return n == "llama3.2" ? std::string("llama3_2") : n;
                         });

struct MultilingualParam {
  const char *file;
  const char *family;
};

// These baselines come from the Hub configs of Qwen2.5-0.5B, TinyLlama and openai-community/gpt2,
// none of which enables clean_up_tokenization_spaces: compare with the plain decode.
class SwiftMultilingualTest : public ::testing::TestWithParam<MultilingualParam> {};

TEST_P(SwiftMultilingualTest, All83Inputs) {
  if (!haveAssets())
    GTEST_SKIP() << "shared assets not found at " << assetsDir();
  auto [file, family] = GetParam();
  json inputs = readJson(swiftDir() + "multilingual_inputs.json");
  json base = readJson(swiftDir() + file);
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  std::map<std::string, std::string> textById;
  for (const json &in : inputs)
    textById[in["id"].get<std::string>()] = in["text"].get<std::string>();
  ASSERT_EQ(base["entries"].size(), 83u);
  for (const json &e : base["entries"]) {
    std::string id = e["id"].get<std::string>();
    ASSERT_TRUE(textById.count(id)) << id;
    std::vector<int32_t> want = idsOf(e["input_ids"]);
    EXPECT_EQ(joinIds(tok->encode(textById[id], true)), joinIds(want)) << id;
    EXPECT_EQ(tok->decode(want, false), e["decoded_with_special"].get<std::string>()) << id;
    EXPECT_EQ(tok->decode(want, true), e["decoded_skip_special"].get<std::string>()) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Baselines, SwiftMultilingualTest,
    ::testing::Values(MultilingualParam{"qwen2_5_multilingual.json", "qwen2.5"},
                      MultilingualParam{"tinyllama_multilingual.json", "llama2"},
                      MultilingualParam{"gpt2_multilingual.json", "gpt2"}),
    [](const auto &info) {
      std::string n = info.param.family;
      return n == "qwen2.5" ? std::string("qwen2_5") : n;
    });

} // namespace
} // namespace kiln::rt
