#include "runtime/engine/fake_runner.h"

#include "tests/runtime/engine/engine_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

using namespace kiln::rt::testing;

SequenceStep stepOf(std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> blocks,
                    LogitsWanted logits = LogitsWanted::kLast) {
  SequenceStep s;
  s.tokenIds = std::move(tokens);
  s.startPosition = start;
  s.blockTables = {std::move(blocks)};
  s.logits = logits;
  return s;
}

TEST(FakeRunnerTest, LogitsDependOnlyOnTheHistoryReadThroughTheBlockTable) {
  FakeRunner runner(fakeConfig());
  StepBatch prefill;
  prefill.sequences.push_back(stepOf({5, 6, 7, 8, 9}, 0, {3, 10}, LogitsWanted::kAll));
  Result<StepOutput> out = runner.execute(prefill);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  ASSERT_EQ(out->numRows(), 5);
  std::vector<float> want(64);
  runner.logitsFor(std::vector<int32_t>{5, 6, 7}, want);
  EXPECT_EQ(std::vector<float>(out->row(2), out->row(2) + 64), want);
  // A decode in another batch position, after the prefill: same history, same logits.
  StepBatch decode;
  decode.sequences.push_back(stepOf({1}, 0, {0}));
  decode.sequences.push_back(stepOf({11}, 5, {3, 10}));
  Result<StepOutput> next = runner.execute(decode);
  ASSERT_TRUE(next.isOk());
  EXPECT_EQ(next->rowsPerSequence, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(next->firstRowOfSequence, (std::vector<int32_t>{0, 1}));
  runner.logitsFor(std::vector<int32_t>{5, 6, 7, 8, 9, 11}, want);
  EXPECT_EQ(std::vector<float>(next->row(1), next->row(1) + 64), want);
  EXPECT_EQ(runner.stats().tokens, 7u);
  EXPECT_EQ(runner.stats().maxTokensInStep, 5);
}

TEST(FakeRunnerTest, AnswersAllArgmaxStepsWithIdsWhenAsked) {
  FakeRunnerConfig fc = fakeConfig();
  fc.answerArgmax = true;
  FakeRunner runner(fc);
  StepBatch prefill;
  prefill.sequences.push_back(stepOf({5, 6, 7}, 0, {3}, LogitsWanted::kArgmax));
  prefill.sequences.push_back(stepOf({9, 8}, 0, {4}, LogitsWanted::kNone));
  prefill.sequences.push_back(stepOf({2, 4, 6, 8}, 0, {5}, LogitsWanted::kArgmax));
  Result<StepOutput> ids = runner.execute(prefill);
  ASSERT_TRUE(ids.isOk()) << ids.status().toString();
  EXPECT_TRUE(ids->logits.empty());
  EXPECT_EQ(ids->numRows(), 2);
  EXPECT_EQ(ids->rowsPerSequence, (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(ids->firstRowOfSequence, (std::vector<int32_t>{0, 1, 1}));
  std::vector<float> row(64);
  runner.logitsFor(std::vector<int32_t>{5, 6, 7}, row);
  const int32_t first = argmaxToken(row);
  runner.logitsFor(std::vector<int32_t>{2, 4, 6, 8}, row);
  EXPECT_EQ(ids->argmaxIds, (std::vector<int32_t>{first, argmaxToken(row)}));
  // One sequence wanting its row makes the step a logits step.
  StepBatch mixed;
  mixed.sequences.push_back(stepOf({1}, 3, {3}, LogitsWanted::kArgmax));
  mixed.sequences.push_back(stepOf({1}, 2, {4}, LogitsWanted::kLast));
  Result<StepOutput> logits = runner.execute(mixed);
  ASSERT_TRUE(logits.isOk()) << logits.status().toString();
  EXPECT_TRUE(logits->argmaxIds.empty());
  EXPECT_EQ(logits->numRows(), 2);
  EXPECT_EQ(runner.stats().argmaxSteps, 1u);
}

TEST(FakeRunnerTest, RejectsBatchesOverTheLimitsNamingThem) {
  FakeRunner runner(fakeConfig());
  StepBatch tooMany;
  for (int i = 0; i < 9; ++i)
    tooMany.sequences.push_back(stepOf({1}, 0, {i}));
  EXPECT_NE(runner.execute(tooMany).status().message().find("maxBatch 8"), std::string::npos);
  StepBatch tooLong;
  tooLong.sequences.push_back(stepOf(std::vector<int32_t>(65, 1), 0, std::vector<int32_t>(17, 0)));
  EXPECT_NE(runner.execute(tooLong).status().message().find("maxTokensPerStep 64"),
            std::string::npos);
  StepBatch uncovered;
  uncovered.sequences.push_back(stepOf({1, 2, 3, 4, 5}, 0, {0}));
  EXPECT_EQ(runner.execute(uncovered).status().code(), StatusCode::kOutOfRange);
  StepBatch badToken;
  badToken.sequences.push_back(stepOf({64}, 0, {0}));
  EXPECT_EQ(runner.execute(badToken).status().code(), StatusCode::kOutOfRange);
}

TEST(FakeRunnerTest, DetectsUnwrittenReadsAndConflictingWrites) {
  FakeRunner runner(fakeConfig());
  StepBatch unwritten;
  unwritten.sequences.push_back(stepOf({1}, 2, {7}));
  Result<StepOutput> r = runner.execute(unwritten);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("never written"), std::string::npos);
  StepBatch clash;
  clash.sequences.push_back(stepOf({1, 2}, 0, {4}));
  clash.sequences.push_back(stepOf({3}, 1, {4}));
  Result<StepOutput> c = runner.execute(clash);
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("two sequences write KV slot"), std::string::npos);
}

} // namespace
} // namespace kiln::rt
