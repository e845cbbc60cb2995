// Flattening a batch into the plan's step inputs: exact ids, positions, slots, prefix sums,
// padded block tables and logits rows.
#include "runtime/exec/step_inputs.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

RunnerLimits smallLimits() {
  RunnerLimits limits;
  limits.maxBatch = 3;
  limits.maxTokensPerStep = 8;
  limits.maxSeqLen = 16;
  limits.maxBlocksPerSeq = 4;
  limits.blockSize = 4;
  limits.numKvBlocks = 10;
  limits.vocabSize = 100;
  return limits;
}

std::vector<int32_t> prefix(std::span<const int32_t> values) {
  return {values.begin(), values.end()};
}

TEST(StepInputsTest, FillsEveryInput) {
  RunnerLimits limits = smallLimits();
  StepBatch batch;
  // A prefill chunk at positions 3..6 (crosses a block boundary) wanting every row, a decode
  // token at position 9 wanting the last, and a chunk wanting none.
  batch.sequences.push_back({{11, 12, 13, 14}, 3, {7, 2}, LogitsWanted::kAll});
  batch.sequences.push_back({{21}, 9, {5, 0, 9}, LogitsWanted::kLast});
  batch.sequences.push_back({{31, 32}, 0, {4}, LogitsWanted::kNone});
  ASSERT_TRUE(validateStep(batch, limits).isOk());
  HostStepInputs inputs(limits);
  StepOutput out;
  StepCounts counts = fillStepInputs(batch, limits, inputs, out);
  EXPECT_EQ(counts.numTokens, 7);
  EXPECT_EQ(counts.numSeqs, 3);
  EXPECT_EQ(counts.numLogits, 5);
  EXPECT_EQ(counts.maxContextLen, 10);
  using K = schema::StepInputKind;
  EXPECT_EQ(prefix(inputs.filled(K::TokenIds, counts)),
            (std::vector<int32_t>{11, 12, 13, 14, 21, 31, 32}));
  EXPECT_EQ(prefix(inputs.filled(K::Positions, counts)),
            (std::vector<int32_t>{3, 4, 5, 6, 9, 0, 1}));
  // slot = block * 4 + position % 4
  EXPECT_EQ(prefix(inputs.filled(K::SlotMapping, counts)),
            (std::vector<int32_t>{31, 8, 9, 10, 37, 16, 17}));
  EXPECT_EQ(prefix(inputs.filled(K::QueryStartLoc, counts)), (std::vector<int32_t>{0, 4, 5, 7}));
  EXPECT_EQ(prefix(inputs.filled(K::ContextLens, counts)), (std::vector<int32_t>{7, 10, 2}));
  EXPECT_EQ(prefix(inputs.filled(K::BlockTables, counts)),
            (std::vector<int32_t>{7, 2, 0, 0, 5, 0, 9, 0, 4, 0, 0, 0}));
  EXPECT_EQ(prefix(inputs.filled(K::LogitsIndices, counts)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(out.rowsPerSequence, (std::vector<int32_t>{4, 1, 0}));
  EXPECT_EQ(out.firstRowOfSequence, (std::vector<int32_t>{0, 4, 5}));
}

TEST(StepInputsTest, ReusedBuffersArePaddedAgain) {
  RunnerLimits limits = smallLimits();
  HostStepInputs inputs(limits);
  StepOutput out;
  StepBatch wide;
  wide.sequences.push_back({{1}, 12, {1, 2, 3, 4}, LogitsWanted::kLast});
  fillStepInputs(wide, limits, inputs, out);
  StepBatch narrow;
  narrow.sequences.push_back({{1}, 0, {6}, LogitsWanted::kLast});
  StepCounts counts = fillStepInputs(narrow, limits, inputs, out);
  EXPECT_EQ(prefix(inputs.filled(schema::StepInputKind::BlockTables, counts)),
            (std::vector<int32_t>{6, 0, 0, 0}));
}

} // namespace
} // namespace kiln::rt
