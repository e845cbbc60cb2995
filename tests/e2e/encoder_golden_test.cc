// Embedding models (encoders, and a decoder) on the cpu backend against transformers' goldens
// (tests/e2e/encoder_util.h;
// cuda_families_test runs the same checks on the CUDA backend).
#include "runtime/embed/embedder.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/encoder_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

TEST(EncoderGolden, BertMeanPooling) {
  checkEncoder("tiny-bert", 6, "cpu", {});
}

TEST(EncoderGolden, XlmRobertaClsPooling) {
  checkEncoder("tiny-xlm-roberta", 6, "cpu", {});
}

// BART feature extraction: the decoder's last hidden state, its input shifted right, with
// cross-attention over the encoder's output (no pooling: hidden states only).
TEST(EncoderGolden, BartDecoderHiddenStates) {
  checkEncoder("tiny-bart", 6, "cpu", {});
}

// A decoder embedding model (Qwen3Model, tensors without "model.", sentence-transformers'
// last-token pooling): causal attention, the final norm's rows instead of logits.
TEST(EncoderGolden, Qwen3EmbeddingLastTokenPooling) {
  checkEncoder("tiny-qwen3-embedding", 5, "cpu", {});
}
// Qwen2Model (gte-Qwen2 style): q/k/v biases, no q/k norms, a sliding_window the config switches
// off (use_sliding_window false), last-token pooling.
TEST(EncoderGolden, Qwen2EmbeddingLastTokenPooling) {
  checkEncoder("tiny-qwen2-embedding", 5, "cpu", {});
}
// MistralModel (e5-mistral style): an explicit head_dim (32, not hidden / heads), a sliding window
// of 6 on every layer that the 84-96-token cases cross, no biases, last-token pooling.
TEST(EncoderGolden, MistralEmbeddingLastTokenPooling) {
  checkEncoder("tiny-mistral-embedding", 5, "cpu", {});
}

// Inputs the encoder cannot take are refused whole, naming the input and the limit.
TEST(EncoderGolden, RefusesInputsBeyondTheLimits) {
  compiler::CompileOptions options;
  options.maxBatch = 2;
  options.maxSeqLen = 16;
  LoadedArtifact loaded = loadForTest(
      compileForTest(std::string(KILN_TEST_DATA_DIR) + "/models/tiny-bert", options), 64);
  ASSERT_NE(loaded.executor, nullptr);
  Result<rt::Embedder> embedder =
      rt::Embedder::create({loaded.executor.get(), rt::PoolingMode::kMean});
  ASSERT_TRUE(embedder.isOk());
  EXPECT_EQ(embedder->embed({{2, 5}, std::vector<int32_t>(17, 5)}).status().message(),
            "input 1 has 17 tokens; this model embeds at most 16 (the compiled --max-seq-len / "
            "--max-tokens-per-step)");
  EXPECT_EQ(embedder->embed({{2, 5000}}).status().message(),
            "input 0 holds token id 5000; the vocabulary has 1023 tokens");
  EXPECT_EQ(embedder->embed({{}}).status().message(), "input 0 has no tokens");
  // Token types: BERT has 2 (type_vocab_size); one per token or none.
  EXPECT_EQ(embedder->embed({{2, 5, 3}}, {{0, 2, 0}}).status().message(),
            "input 0 holds token type 2; the model has 2 token types");
  EXPECT_EQ(embedder->embed({{2, 5, 3}}, {{0, 1}}).status().message(),
            "input 0 has 2 token types for 3 tokens");
  EXPECT_EQ(embedder->embed({{2, 5, 3}, {2, 3}}, {{0, 0, 1}}).status().message(),
            "token types are given for 1 inputs of 2");
  // More inputs than one step holds run as several steps, in order.
  std::vector<std::vector<int32_t>> five(5, std::vector<int32_t>{2, 40, 41, 3});
  five[3] = {2, 50, 3};
  Result<std::vector<rt::Embedding>> out = embedder->embed(five);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ((*out)[3].numTokens, 3);
  EXPECT_EQ((*out)[4].hidden, (*out)[0].hidden);

  // A pool of 2 blocks of 4 tokens cannot hold a 9-token input's step.
  options.kvBlockSize = 4;
  LoadedArtifact small = loadForTest(
      compileForTest(std::string(KILN_TEST_DATA_DIR) + "/models/tiny-bert", options), 2);
  ASSERT_NE(small.executor, nullptr);
  Result<rt::Embedder> tight = rt::Embedder::create({small.executor.get(), rt::PoolingMode::kMean});
  ASSERT_TRUE(tight.isOk());
  EXPECT_EQ(tight->embed({std::vector<int32_t>(9, 5)}).status().message(),
            "input 0 needs 3 KV blocks for one step; the cache holds 2 (raise --kv-cache-mb)");
}

} // namespace
} // namespace kiln::e2e
