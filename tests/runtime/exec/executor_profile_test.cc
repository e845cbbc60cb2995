// Executor::profile and the op cost model (op_cost.h) on the tiny-llama plan on cpu: the exact
// bytes and flops of each op kind for a ragged step, and a profile that times every op without
// changing what the step computes. Times are never compared with a threshold.
#include "runtime/exec/executor.h"
#include "runtime/exec/op_cost.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::rt::testing {
namespace {

class ExecutorProfileTest : public TinyLlamaOnCpuTest {
protected:
  static void SetUpTestSuite() { setUpTinyLlama("executor-profile"); }

  void SetUp() override {
    auto made = Executor::create(*artifact_, *cpu_);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    executor_ = std::move(made).value();
  }

  const schema::Op &op(const std::string &name) const {
    for (const schema::Op *o : *executor_->rank().program())
      if (o->name()->str() == name)
        return *o;
    ADD_FAILURE() << "no op " << name;
    return *executor_->rank().program()->Get(0);
  }

  OpCost cost(const std::string &name) const {
    return estimateOpCost(op(name), executor_->buffers(), counts_, shapes_,
                          *artifact_->plan().kv_cache());
  }

  // Sequence A prefills 3 tokens at 0; sequence B decodes one at position 9 (context 10).
  StepBatch raggedBatch() const {
    StepBatch batch;
    batch.sequences.push_back({{1, 2, 3}, 0, {{0}}, LogitsWanted::kLast});
    batch.sequences.push_back({{4}, 9, {{1, 2, 3}}, LogitsWanted::kLast});
    return batch;
  }

  std::unique_ptr<Executor> executor_;
  const StepCounts counts_{4, 2, 2, 10};
  const std::vector<SequenceShape> shapes_{{3, 3}, {1, 10}};
};

constexpr uint64_t kF32 = 4, kI32 = 4;

TEST_F(ExecutorProfileTest, SequenceShapesAreNewTokensAndContextAfterTheStep) {
  std::vector<SequenceShape> shapes = sequenceShapes(raggedBatch());
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].newTokens, 3);
  EXPECT_EQ(shapes[0].contextLen, 3);
  EXPECT_EQ(shapes[1].newTokens, 1);
  EXPECT_EQ(shapes[1].contextLen, 10);
}

TEST_F(ExecutorProfileTest, LinearReadsXAndTheWholeWeightAndDoesTwoFlopsPerMultiplyAdd) {
  const TinyLlamaConfig &c = model_->config;
  const uint64_t in = c.hidden, out = uint64_t(c.heads + 2 * c.kvHeads) * c.headDim;
  OpCost qkv = cost("layers.0.qkv");
  EXPECT_EQ(qkv.weightBytes, out * in * kF32);
  EXPECT_EQ(qkv.bytesRead, 4 * in * kF32 + out * in * kF32);
  EXPECT_EQ(qkv.bytesWritten, 4 * out * kF32);
  EXPECT_EQ(qkv.flops, 2 * 4 * in * out);
}

TEST_F(ExecutorProfileTest, EmbeddingReadsOneTableRowPerToken) {
  OpCost embed = cost("embed");
  const uint64_t row = uint64_t(model_->config.hidden) * kF32;
  EXPECT_EQ(embed.weightBytes, 4 * row);
  EXPECT_EQ(embed.bytesRead, 4 * kI32 + 4 * row);
  EXPECT_EQ(embed.bytesWritten, 4 * row);
  EXPECT_EQ(embed.flops, 0u);
}

TEST_F(ExecutorProfileTest, RopeKvWriteAlsoWritesEachTokensKeyAndValue) {
  const TinyLlamaConfig &c = model_->config;
  const uint64_t qkvWidth = uint64_t(c.heads + 2 * c.kvHeads) * c.headDim;
  const uint64_t qWidth = uint64_t(c.heads) * c.headDim;
  OpCost rope = cost("layers.1.rope");
  EXPECT_EQ(rope.bytesRead, 4 * qkvWidth * kF32 + 2 * 4 * kI32 + (c.headDim / 2) * kF32);
  EXPECT_EQ(rope.bytesWritten, 4 * qWidth * kF32 + 4 * 2 * uint64_t(c.kvHeads) * c.headDim * kF32);
}

TEST_F(ExecutorProfileTest, AttentionReadsEachSequencesCacheOnceAndCountsCausalPairs) {
  const TinyLlamaConfig &c = model_->config;
  const uint64_t qWidth = uint64_t(c.heads) * c.headDim;
  const uint64_t kvPerPosition = 2 * uint64_t(c.kvHeads) * c.headDim * kF32;
  // A: 3 new tokens see 1 + 2 + 3 positions; B: one token sees 10. Blocks of 4: 1 + 3 entries.
  const uint64_t pairs = 6 + 10, blockEntries = 1 + 3;
  OpCost attention = cost("layers.0.attention");
  // q, positions, query_start_loc and context_lens at the step's rows (Sequences rows: 2).
  EXPECT_EQ(attention.bytesRead, 4 * qWidth * kF32 + 4 * kI32 + 2 * kI32 + 2 * kI32 +
                                     (3 + 10) * kvPerPosition + blockEntries * kI32);
  EXPECT_EQ(attention.bytesWritten, 4 * qWidth * kF32);
  EXPECT_EQ(attention.flops, pairs * 4 * qWidth);
}

TEST_F(ExecutorProfileTest, OtherOpsReadEveryInputAndWriteEveryOutputAtTheStepRows) {
  const uint64_t hidden = model_->config.hidden;
  OpCost norm = cost("layers.0.post_norm"); // x, residual, w -> residual, y
  EXPECT_EQ(norm.bytesRead, (2 * 4 * hidden + hidden) * kF32);
  EXPECT_EQ(norm.weightBytes, hidden * kF32);
  EXPECT_EQ(norm.bytesWritten, 2 * 4 * hidden * kF32);
  OpCost gather = cost("gather_logits_rows"); // 4 token rows + 2 indices -> 2 rows
  EXPECT_EQ(gather.bytesRead, 4 * hidden * kF32 + 2 * kI32);
  EXPECT_EQ(gather.bytesWritten, 2 * hidden * kF32);
}

TEST_F(ExecutorProfileTest, ProfileTimesEveryOpAndLeavesTheStepsResultUnchanged) {
  ASSERT_EQ(artifact_->plan().activation_dtype(), schema::DType::F32);
  StepBatch prefillA, prefillB;
  prefillA.sequences.push_back({{5}, 0, {{0}}, LogitsWanted::kNone});
  prefillB.sequences.push_back(
      {{6, 7, 8, 9, 10, 11, 12, 13, 14}, 0, {{1, 2, 3}}, LogitsWanted::kNone});
  // Positions 0 of A and 0..8 of B first, so the ragged step's contexts are real.
  ASSERT_TRUE(executor_->execute(prefillA).isOk());
  ASSERT_TRUE(executor_->execute(prefillB).isOk());
  StepBatch step = raggedBatch();
  step.sequences[0].tokenIds = {5, 2, 3};
  auto before = executor_->execute(step);
  ASSERT_TRUE(before.isOk()) << before.status().message();

  auto profile = executor_->profile(step, 3);
  ASSERT_TRUE(profile.isOk()) << profile.status().message();
  EXPECT_EQ(profile->opMicros.size(), executor_->rank().program()->size());
  for (double micros : profile->opMicros)
    EXPECT_GE(micros, 0.0);
  EXPECT_GT(profile->eagerMicros, 0.0);
  EXPECT_EQ(profile->graphMicros, 0.0); // the cpu device has no graphs
  // The cpu backend runs every op one way: nothing to describe.
  EXPECT_EQ(profile->opImpls, std::vector<std::string>(profile->opMicros.size()));
  EXPECT_EQ(profile->counts.numTokens, 4);
  EXPECT_EQ(profile->counts.numSeqs, 2);
  EXPECT_EQ(profile->counts.numLogits, 2);

  auto after = executor_->execute(step);
  ASSERT_TRUE(after.isOk()) << after.status().message();
  EXPECT_EQ(after->logits, before->logits); // bit-identical: same inputs, same cache
}

TEST_F(ExecutorProfileTest, ProfileRejectsNoRepeatsAndBadSteps) {
  auto none = executor_->profile(raggedBatch(), 0);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("repeats 0"), std::string::npos)
      << none.status().message();
  StepBatch tooMany;
  for (int i = 0; i <= model_->config.maxBatch; ++i)
    tooMany.sequences.push_back({{1}, 0, {{i}}, LogitsWanted::kLast});
  EXPECT_FALSE(executor_->profile(tooMany, 1).isOk());
}

} // namespace
} // namespace kiln::rt::testing
