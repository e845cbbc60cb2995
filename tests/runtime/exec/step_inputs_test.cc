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
  batch.sequences.push_back({{11, 12, 13, 14}, 3, {{7, 2}}, LogitsWanted::kAll});
  batch.sequences.push_back({{21}, 9, {{5, 0, 9}}, LogitsWanted::kLast});
  batch.sequences.push_back({{31, 32}, 0, {{4}}, LogitsWanted::kNone});
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
  wide.sequences.push_back({{1}, 12, {{1, 2, 3, 4}}, LogitsWanted::kLast});
  fillStepInputs(wide, limits, inputs, out);
  StepBatch narrow;
  narrow.sequences.push_back({{1}, 0, {{6}}, LogitsWanted::kLast});
  StepCounts counts = fillStepInputs(narrow, limits, inputs, out);
  EXPECT_EQ(prefix(inputs.filled(schema::StepInputKind::BlockTables, counts)),
            (std::vector<int32_t>{6, 0, 0, 0}));
}

// Two KV cache groups, the second with sliding window 4: each sequence brings a table per group;
// a window group's entries before the window of the step's first token may be kNoKvBlock (filled
// as block 0), one inside it may not.
TEST(StepInputsTest, FillsEveryKvCacheGroupsTablesAndSlots) {
  RunnerLimits limits = smallLimits();
  limits.kvGroupWindows = {0, 4};
  StepBatch batch;
  // Positions 9..10: the window of position 9 starts at 6, in block 1.
  batch.sequences.push_back({{1, 2}, 9, {{7, 2, 9}, {kNoKvBlock, 5, 6}}, LogitsWanted::kLast});
  ASSERT_TRUE(validateStep(batch, limits).isOk());
  HostStepInputs inputs(limits);
  StepOutput out;
  StepCounts counts = fillStepInputs(batch, limits, inputs, out);
  using K = schema::StepInputKind;
  EXPECT_EQ(prefix(inputs.filled(K::SlotMapping, counts, 0)), (std::vector<int32_t>{37, 38}));
  EXPECT_EQ(prefix(inputs.filled(K::SlotMapping, counts, 1)), (std::vector<int32_t>{25, 26}));
  EXPECT_EQ(prefix(inputs.filled(K::BlockTables, counts, 0)), (std::vector<int32_t>{7, 2, 9, 0}));
  EXPECT_EQ(prefix(inputs.filled(K::BlockTables, counts, 1)), (std::vector<int32_t>{0, 5, 6, 0}));

  batch.sequences[0].blockTables[1] = {4, kNoKvBlock, 6};
  Status inWindow = validateStep(batch, limits);
  ASSERT_FALSE(inWindow.isOk());
  EXPECT_EQ(inWindow.message(),
            "sequence 0 block table 1 entry 1 is block -1; the KV cache has 10 blocks");
  batch.sequences[0].blockTables = {{7, 2, 9}};
  EXPECT_EQ(
      validateStep(batch, limits).message(),
      "sequence 0 has 1 block tables; the artifact's KV cache has 2 group(s), one table each");
  limits.kvGroupWindows = {};
  batch.sequences[0].blockTables = {{kNoKvBlock, 2, 9}};
  EXPECT_FALSE(validateStep(batch, limits).isOk()) << "a full-attention table has no gaps";
}

// A batch asking for more logits rows than the plan holds (max_logits_per_step 3 here): kLast rows
// grouped while they fit, a long kAll sequence as consecutive 3-token chunks that keep its
// sequenceLength, kArgmax turned into kLast; merging gives the rows back in batch order.
TEST(StepInputsTest, SplitsABatchByLogitsRows) {
  SequenceStep last{{1, 2}, 0, {{0}}, LogitsWanted::kLast};
  SequenceStep all{{10, 11, 12, 13, 14, 15, 16}, 2, {{1, 2, 3}}, LogitsWanted::kAll};
  SequenceStep argmax{{20}, 5, {{4, 5}}, LogitsWanted::kArgmax};
  SequenceStep none{{30, 31}, 0, {{6}}, LogitsWanted::kNone};
  StepBatch batch{{last, all, argmax, none}};
  ASSERT_EQ(logitsRowsOf(batch), 9);
  const LogitsPieces split = splitByLogitsRows(batch, 3);
  ASSERT_EQ(split.pieces.size(), 4u);
  EXPECT_EQ(split.sources, (std::vector<std::vector<int32_t>>{{0}, {1}, {1}, {1, 2, 3}}));
  const std::vector<SequenceStep> &first = split.pieces[1].sequences;
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].tokenIds, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(first[0].startPosition, 2);
  EXPECT_EQ(first[0].sequenceLength, 9);
  EXPECT_EQ(first[0].blockTables, all.blockTables);
  EXPECT_EQ(split.pieces[2].sequences[0].tokenIds, (std::vector<int32_t>{13, 14, 15}));
  EXPECT_EQ(split.pieces[2].sequences[0].startPosition, 5);
  const std::vector<SequenceStep> &tail = split.pieces[3].sequences;
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[0].tokenIds, (std::vector<int32_t>{16}));
  EXPECT_EQ(tail[0].startPosition, 8);
  EXPECT_EQ(tail[0].sequenceLength, 9);
  EXPECT_EQ(tail[1].logits, LogitsWanted::kLast);
  EXPECT_EQ(tail[2].logits, LogitsWanted::kNone);
  for (const StepBatch &piece : split.pieces)
    EXPECT_LE(logitsRowsOf(piece), 3);

  // Each piece's row r holds the value 100 * piece + r; merged rows keep batch order.
  StepOutput merged;
  merged.rowsPerSequence.assign(4, 0);
  merged.firstRowOfSequence.assign(4, 0);
  const std::vector<std::vector<int32_t>> rowsPerPiece = {{1}, {3}, {3}, {1, 1, 0}};
  for (size_t p = 0; p < split.pieces.size(); ++p) {
    StepOutput piece;
    piece.vocabSize = 1;
    piece.rowsPerSequence = rowsPerPiece[p];
    int32_t row = 0;
    for (int32_t rows : rowsPerPiece[p]) {
      piece.firstRowOfSequence.push_back(row);
      for (int32_t r = 0; r < rows; ++r, ++row)
        piece.logits.push_back(float(100 * p + row));
    }
    appendPieceOutput(piece, split.sources[p], merged);
  }
  EXPECT_EQ(merged.logits,
            (std::vector<float>{0, 100, 101, 102, 200, 201, 202, 300, 301}));
  EXPECT_EQ(merged.rowsPerSequence, (std::vector<int32_t>{1, 7, 1, 0}));
  EXPECT_EQ(merged.firstRowOfSequence, (std::vector<int32_t>{0, 1, 8, 9}));
}

} // namespace
} // namespace kiln::rt
