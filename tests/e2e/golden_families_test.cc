// The Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma 2, Gemma 3, Mixtral and Qwen3-MoE fixtures (tiny
// random weights in each family's real checkpoint layout, tests/data/README.md) compiled by kiln
// and run on the cpu backend against transformers (tools/goldens/make_family_goldens.py): logits
// within 1e-4 at every prompt position and 16 greedy steps, greedy ids identical; the prompt in
// chunks and after a prefix-cache hit give the same rows. Windows shorter than the prompt also run
// with KV blocks of 4 tokens, so a window starts inside a block and spans several.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

compiler::CompileOptions smallBlocks() {
  compiler::CompileOptions options;
  options.kvBlockSize = 4;
  return options;
}

// Sliding window 6 (shorter than the long prompt), head_dim 32 != hidden / heads.
TEST(GoldenFamilies, MistralWindow6) {
  checkGoldenLogits("tiny-mistral");
  checkGoldenChunkedAndCached("tiny-mistral", 5, smallBlocks());
}

// Window 20 (longer than a 16-token KV block, shorter than prompt + greedy), BF16 checkpoint.
TEST(GoldenFamilies, MistralWindow20) {
  checkGoldenLogits("tiny-mistral-window20");
  checkGoldenChunkedAndCached("tiny-mistral-window20", 7);
}

// q/k/v biases, tied embeddings, yarn with the legacy `type` key, and a sliding window that
// use_sliding_window: false switches off.
TEST(GoldenFamilies, Qwen2TiedYarn) {
  checkGoldenLogits("tiny-qwen2");
  checkGoldenChunkedAndCached("tiny-qwen2", 6);
}

// Untied, MQA (4 query heads over 1 KV head), linear rope scaling.
TEST(GoldenFamilies, Qwen2UntiedLinearMqa) {
  checkGoldenLogits("tiny-qwen2-untied");
  checkGoldenChunkedAndCached("tiny-qwen2-untied", 6);
}

// Dynamic NTK past max_position_embeddings 12: frequencies follow each sequence's length, so the
// golden's 36 positions need a --max-seq-len beyond the default (12 x factor 2).
TEST(GoldenFamilies, Qwen2DynamicNtk) {
  compiler::CompileOptions options;
  options.maxSeqLen = 64;
  checkGoldenLogits("tiny-qwen2-dynamic", "cpu", options);
  options.kvBlockSize = 4;
  checkGoldenChunkedAndCached("tiny-qwen2-dynamic", 6, options);
}

// Per-head q_norm / k_norm before rope, explicit head_dim 32, F16 checkpoint.
TEST(GoldenFamilies, Qwen3QkNorm) {
  checkGoldenLogits("tiny-qwen3");
  checkGoldenChunkedAndCached("tiny-qwen3", 6);
}

// Tied, MQA, head_dim 16, 3 layers.
TEST(GoldenFamilies, Qwen3TiedMqa) {
  checkGoldenLogits("tiny-qwen3-tied");
  checkGoldenChunkedAndCached("tiny-qwen3-tied", 6);
}

// Fused qkv_proj / gate_up_proj in the checkpoint, sliding window 10, a Phi-3-mini-4k key set.
TEST(GoldenFamilies, Phi3FusedWindow10) {
  checkGoldenLogits("tiny-phi3");
  checkGoldenChunkedAndCached("tiny-phi3", 5, smallBlocks());
}

// longrope: short factors while the sequence is at most 16 tokens, long ones beyond (case 1
// crosses 16 while generating), partial rotary 0.75, attention factor sqrt(1 + ln 4 / ln 16).
TEST(GoldenFamilies, Phi3LongRope) {
  checkGoldenLogits("tiny-phi3-longrope");
  checkGoldenChunkedAndCached("tiny-phi3-longrope", 6, smallBlocks());
}

// Gemma 2: GeGLU, (1 + w) norms four a layer, embeddings scaled by sqrt(hidden), attention
// scaled by query_pre_attn_scalar 24 with scores soft-capped at 2.5 (15% of them beyond it) and
// logits at 5.0 (12%), window 6 on layers 0 and 2, full attention on 1 and 3, head_dim 32.
TEST(GoldenFamilies, Gemma2SoftcapsAlternatingWindows) {
  checkGoldenLogits("tiny-gemma2");
  checkGoldenChunkedAndCached("tiny-gemma2", 5, smallBlocks());
}

// Gemma 3 text: (1 + w) q/k norms, five local layers (window 6, RoPE base 1e4 unscaled) to one
// global (base 1e6, linear scaling 8), no soft-capping, every key written out.
TEST(GoldenFamilies, Gemma3LocalAndGlobalRope) {
  checkGoldenLogits("tiny-gemma3");
  checkGoldenChunkedAndCached("tiny-gemma3", 5, smallBlocks());
}

// Mixtral: 8 experts, the top 2 by softmax probability renormalized; 16 experts top 4 with
// norm_topk_prob and a dense layer between the sparse ones (Qwen3-MoE, q/k norms). The router's
// k-th and (k+1)-th logits are at least 0.0144 / 0.0054 apart on every golden token.
TEST(GoldenFamilies, MixtralTop2Of8) {
  checkGoldenLogits("tiny-mixtral");
  checkGoldenChunkedAndCached("tiny-mixtral", 5);
}
TEST(GoldenFamilies, Qwen3MoeTop4Of16WithADenseLayer) {
  checkGoldenLogits("tiny-qwen3-moe");
  checkGoldenChunkedAndCached("tiny-qwen3-moe", 6);
}
// Qwen2-MoE: 8 experts top 4 without renormalization plus a shared expert scaled by
// sigmoid(x . shared_expert_gate); decoder_sparse_step 2 makes layers 0 and 2 dense; q/k/v biases.
TEST(GoldenFamilies, Qwen2MoeSharedExpertTop4Of8) {
  checkGoldenLogits("tiny-qwen2-moe");
  checkGoldenChunkedAndCached("tiny-qwen2-moe", 6);
}

// Gemma3ForConditionalGeneration's text tower: a sparse text_config (Gemma3TextConfig's defaults
// fill the rest), weights under language_model.model., the vision tower's tensors unread.
TEST(GoldenFamilies, Gemma3ConditionalGenerationTextTower) {
  checkGoldenLogits("tiny-gemma3-mm");
  checkGoldenChunkedAndCached("tiny-gemma3-mm", 6);
}

} // namespace
} // namespace kiln::e2e
