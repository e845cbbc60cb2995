// Greedy steps (LogitsWanted::kArgmax) on the tiny-llama plan on cpu: when every sequence asks
// only for its argmax the executor returns one id per row (Device::argmaxRows) and no logits, and
// the ids are those of the logits the same step gives as kLast; a step mixing kArgmax with kLast
// or kAll gives every row's logits as before.
#include "runtime/exec/executor.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln::rt::testing {
namespace {

class ExecutorArgmaxTest : public TinyLlamaOnCpuTest {
protected:
  static void SetUpTestSuite() { setUpTinyLlama("executor-argmax"); }

  // A fresh executor runs `batch` after prefilling sequences 0 and 1 (blocks 0 / 1, 6 tokens).
  static StepOutput run(const StepBatch &batch) {
    auto made = Executor::create(*artifact_, *cpu_);
    EXPECT_TRUE(made.isOk()) << made.status().message();
    if (!made.isOk())
      return {};
    StepBatch prefill{{{{1, 2, 3, 4, 5, 6}, 0, {{0, 1}}, LogitsWanted::kNone},
                       {{9, 8, 7, 6, 5, 4}, 0, {{2, 3}}, LogitsWanted::kNone}}};
    EXPECT_TRUE((*made)->execute(prefill).isOk());
    auto out = (*made)->execute(batch);
    EXPECT_TRUE(out.isOk()) << out.status().message();
    return out.isOk() ? std::move(out).value() : StepOutput{};
  }

  static StepBatch decode(LogitsWanted first, LogitsWanted second) {
    return StepBatch{{{{11}, 6, {{0, 1}}, first}, {{12}, 6, {{2, 3}}, second}}};
  }
};

int32_t argmaxOf(const StepOutput &out, int32_t row) {
  const float *x = out.row(row);
  return static_cast<int32_t>(std::max_element(x, x + out.vocabSize) - x);
}

TEST_F(ExecutorArgmaxTest, GreedyStepsReturnTheIdsOfTheirLogitsRows) {
  const StepOutput logits = run(decode(LogitsWanted::kLast, LogitsWanted::kLast));
  const StepOutput ids = run(decode(LogitsWanted::kArgmax, LogitsWanted::kArgmax));
  ASSERT_EQ(logits.numRows(), 2);
  EXPECT_TRUE(logits.argmaxIds.empty());
  EXPECT_TRUE(ids.logits.empty());
  ASSERT_EQ(ids.argmaxIds.size(), 2u);
  EXPECT_EQ(ids.numRows(), 2);
  EXPECT_EQ(ids.rowsPerSequence, logits.rowsPerSequence);
  EXPECT_EQ(ids.firstRowOfSequence, logits.firstRowOfSequence);
  EXPECT_EQ(ids.argmaxIds[0], argmaxOf(logits, 0));
  EXPECT_EQ(ids.argmaxIds[1], argmaxOf(logits, 1));
  EXPECT_NE(ids.argmaxIds[0], ids.argmaxIds[1]); // two different contexts, two rows compared
}

TEST_F(ExecutorArgmaxTest, MixedStepsReturnLogits) {
  const StepOutput plain = run(decode(LogitsWanted::kLast, LogitsWanted::kLast));
  const StepOutput mixed = run(decode(LogitsWanted::kArgmax, LogitsWanted::kLast));
  EXPECT_TRUE(mixed.argmaxIds.empty());
  EXPECT_EQ(mixed.logits, plain.logits);
  // A prefill chunk that needs no logits beside a greedy decode: ids only, for the decode row.
  const StepOutput ids = run(decode(LogitsWanted::kArgmax, LogitsWanted::kNone));
  ASSERT_EQ(ids.argmaxIds.size(), 1u);
  EXPECT_EQ(ids.argmaxIds[0], argmaxOf(plain, 0));
}

} // namespace
} // namespace kiln::rt::testing
