// Reference vectors from other implementations, read from the shared assets:
// llama.cpp's tokenizer tests (ids from HF AutoTokenizer, add_special_tokens=False) and
// swift-transformers' encodings (transformers 4.57.1 baselines, 83 multilingual inputs).
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kiln::rt {
namespace {

using testing::assetsDir;
using testing::haveAssets;
using testing::joinIds;

struct VocabCase {
  const char *vectors; // llama.cpp ggml-vocab-<name>
  const char *family;  // our tokenizer family
};

class LlamaCppVocabTest : public ::testing::TestWithParam<VocabCase> {};

TEST_P(LlamaCppVocabTest, EveryVectorMatchesExactly) {
  if (!haveAssets())
    GTEST_SKIP() << "shared assets not found at " << assetsDir();
  auto [vectors, family] = GetParam();
  std::string base = assetsDir() + "/expected/llamacpp-vocab-tests/ggml-vocab-" + vectors + ".gguf";
  auto inp = readFile(base + ".inp");
  auto out = readFile(base + ".out");
  ASSERT_TRUE(inp.isOk() && out.isOk()) << base;
  auto tok = testing::loadFamily(family);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  auto inputs = testing::splitOn(*inp, "\n__ggml_vocab_test__\n");
  auto lines = testing::splitOn(*out, "\n");
  ASSERT_GE(inputs.size(), 46u);
  int checked = 0;
  for (size_t i = 0; i < lines.size() && i < inputs.size(); ++i) {
    if (lines[i].empty() && i + 1 == lines.size())
      break;
    std::vector<int32_t> ids = tok->encode(inputs[i], false);
    std::istringstream expected(lines[i]);
    std::vector<int32_t> want;
    for (int32_t v; expected >> v;)
      want.push_back(v);
    EXPECT_EQ(joinIds(ids), joinIds(want))
        << vectors << " input " << i << ": '" << inputs[i] << "'";
    ++checked;
  }
  EXPECT_EQ(checked, 46);
}

INSTANTIATE_TEST_SUITE_P(
    Families, LlamaCppVocabTest,
    ::testing::Values(VocabCase{"llama-spm", "llama2"}, VocabCase{"llama-bpe", "llama3"},
                      VocabCase{"phi-3", "phi3"}, VocabCase{"qwen2", "qwen2.5"},
                      VocabCase{"gpt-2", "gpt2"}, VocabCase{"deepseek-r1-qwen", "qwen2.5"}),
    [](const auto &info) {
      std::string n = info.param.vectors;
      for (char &c : n)
        if (c == '-')
          c = '_';
      return n;
    });

} // namespace
} // namespace kiln::rt
