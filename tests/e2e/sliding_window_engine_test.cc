// Sliding-window layers through the engine on the cpu backend (tests/e2e/sliding_window_util.h;
// cuda_families_test runs the same checks on the CUDA backend).
#include "tests/e2e/sliding_window_util.h"

#include <gtest/gtest.h>

namespace kiln::e2e {
namespace {

TEST(SlidingWindowEngine, Gemma2AlternatingLayers) {
  checkSlidingWindowEngine("tiny-gemma2", "cpu", {});
}

TEST(SlidingWindowEngine, Gemma3FiveLocalOneGlobal) {
  checkSlidingWindowEngine("tiny-gemma3", "cpu", {});
}

TEST(SlidingWindowEngine, MistralEveryLayerWindowed) {
  checkSlidingWindowEngine("tiny-mistral", "cpu", {});
}

} // namespace
} // namespace kiln::e2e
