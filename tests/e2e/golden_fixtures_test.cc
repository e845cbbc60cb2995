// Tiny random Llama fixtures (committed, made by tools/goldens/make_llama_goldens.py) compiled by
// kiln and run on the cpu backend: logits within 1e-4 of transformers (fp32) at every prompt
// position and 16 greedy steps, greedy ids identical.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

// Untied lm_head, F32, sharded safetensors (model.safetensors.index.json), head_dim derived.
TEST(GoldenFixtures, TinyLlamaMatchesTransformers) { checkGoldenLogits("tiny-llama"); }

// Tied embeddings (no lm_head tensor), BF16 checkpoint.
TEST(GoldenFixtures, TinyLlamaTiedMatchesTransformers) { checkGoldenLogits("tiny-llama-tied"); }

// llama3 rope scaling, explicit head_dim 32 != hidden/heads, 4 query heads over 1 KV head, F16.
TEST(GoldenFixtures, TinyLlama3MatchesTransformers) { checkGoldenLogits("tiny-llama3"); }

} // namespace
} // namespace kiln::e2e
