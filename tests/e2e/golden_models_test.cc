// Real trained checkpoints from ../shared/assets (skipped, saying so, when absent) compiled by kiln
// and checked against transformers: logits within 1e-4, greedy ids identical.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

// Tied embedding stored only as lm_head.weight with a __metadata__ alias; GQA 8/4.
TEST(GoldenModels, TinyStories656KMatchesTransformers) { checkGoldenLogits("tinystories-656K"); }

// llama2.c's stories260K converted to HF layout: 5 layers, head_dim 8.
TEST(GoldenModels, Stories260KMatchesTransformers) { checkGoldenLogits("stories260K"); }

} // namespace
} // namespace kiln::e2e
