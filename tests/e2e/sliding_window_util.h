// Sliding-window layers through the engine (schema/plan.fbs "KV cache groups"): each sliding-window
// group keeps only its last window's blocks, so a KV pool too small to hold every layer's whole
// context still serves the golden prompts, and the answers stay exact: the greedy ids equal
// transformers' and each generated token's logprob equals the golden logits' log-softmax within
// 1e-4. Chunked prefill (5 tokens a step) and prefix-cache hits run over those freed blocks.
#pragma once

#include "compiler/driver/compile.h"

#include <string>

namespace kiln::e2e {

// Compiles golden `name`'s model with `options` (KV blocks of 4 tokens, max batch 4, max length
// 64 set here) for `device` and checks it through the engine: alone in the smallest pool that
// holds its longest case with windows (smaller than without), then all cases batched twice.
void checkSlidingWindowEngine(const std::string &name, const std::string &device,
                              compiler::CompileOptions options);

} // namespace kiln::e2e
