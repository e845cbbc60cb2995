// Tokenizer::tokenBytes, the bytes each token adds to generated text (what the constraint engine
// of runtime/structured matches): for every tokenizer family in the shared assets, the tokens of
// a text put back together byte for byte give the text (SentencePiece families: after the one
// space their normalizer prepends), special tokens give nothing, and a byte-fallback token gives
// its one byte, so a code point split over tokens is split the same way.
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

const std::vector<std::string> kTexts = {"Hello world!",
                                         "{\"name\": \"a\", \"n\": [1, 2.5e-3]}",
                                         "na\xC3\xAFve caf\xC3\xA9",
                                         "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80",
                                         "tab\tnew\nline",
                                         "x  two  spaces"};

TEST(TokenBytes, TokensReassembleTheTextInEveryFamily) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  int checked = 0;
  for (const testing::Family &family : testing::families()) {
    SCOPED_TRACE(family.name);
    Result<Tokenizer> tokenizer = testing::loadFamily(family.name);
    ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().toString();
    for (const std::string &text : kTexts) {
      const std::vector<int32_t> ids = tokenizer->encode(text, false);
      if (tokenizer->decode(ids, false) != text)
        continue; // characters the vocabulary cannot spell (TinyStories' 512 tokens: <unk>)
      std::string bytes;
      for (int32_t id : ids)
        bytes += tokenizer->tokenBytes(id);
      EXPECT_TRUE(bytes == text || bytes == " " + text) << "'" << text << "' -> '" << bytes << "'";
      ++checked;
    }
  }
  EXPECT_GE(checked, 50); // of 60: the two 512-token vocabularies cannot spell every text
}

TEST(TokenBytes, SpecialTokensGiveNothingAndByteTokensOneByte) {
  if (!testing::haveAssets())
    GTEST_SKIP() << "shared assets not found at " << testing::assetsDir();
  Result<Tokenizer> llama2 = testing::loadFamily("llama2");
  ASSERT_TRUE(llama2.isOk()) << llama2.status().toString();
  EXPECT_EQ(llama2->tokenBytes(llama2->bosTokenId()), "");
  EXPECT_EQ(llama2->tokenBytes(llama2->tokenToId("<0xE6>")), "\xE6");
  EXPECT_EQ(llama2->tokenBytes(llama2->tokenToId("\xE2\x96\x81world")), " world");
  EXPECT_EQ(llama2->tokenBytes(-1), "");
  Result<Tokenizer> qwen = testing::loadFamily("qwen2.5");
  ASSERT_TRUE(qwen.isOk()) << qwen.status().toString();
  EXPECT_EQ(qwen->tokenBytes(qwen->tokenToId("<|im_end|>")), "");
  EXPECT_EQ(qwen->tokenBytes(qwen->tokenToId("\xC4\xA0world")), " world"); // byte-level
}

} // namespace
} // namespace kiln::rt
