// The executor runs a Llama-shaped plan built in the test (tiny_llama.h) on the cpu device and
// matches a dense double-precision reference; paging, batching and chunking do not change logits;
// every invalid step is rejected with a message naming the limit.
#include "runtime/exec/executor.h"

#include "runtime/hal/device.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace kiln::rt {
namespace {

constexpr double kReferenceTolerance = 1e-4;
constexpr double kConsistencyTolerance = 1e-5;
constexpr int32_t kNumKvBlocks = 64;

std::vector<int32_t> tokensOf(int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t &t : tokens)
    t = static_cast<int32_t>(rng() % 64);
  return tokens;
}

SequenceStep sequenceStep(const std::vector<int32_t> &tokens, int32_t start, int32_t count,
                          const std::vector<int32_t> &blocks, LogitsWanted logits) {
  SequenceStep step;
  step.tokenIds.assign(tokens.begin() + start, tokens.begin() + start + count);
  step.startPosition = start;
  step.blockTables = {blocks};
  step.logits = logits;
  return step;
}

class ExecutorTest : public testing::TinyLlamaOnCpuTest {
protected:
  static void SetUpTestSuite() { setUpTinyLlama("kiln-executor-test"); }

  static std::unique_ptr<Executor> makeExecutor() {
    ExecutorOptions options;
    options.numKvBlocks = kNumKvBlocks;
    auto executor = Executor::create(*artifact_, *cpu_, options);
    EXPECT_TRUE(executor.isOk()) << executor.status().toString();
    return executor.isOk() ? std::move(executor).value() : nullptr;
  }

  static StepOutput run(Executor &executor, StepBatch batch) {
    auto out = executor.execute(batch);
    EXPECT_TRUE(out.isOk()) << out.status().toString();
    return out.isOk() ? std::move(out).value() : StepOutput();
  }

  // Largest |a - b| between row `rowA` of `a` and row `rowB` of `b`.
  static double rowDiff(const StepOutput &a, int32_t rowA, const StepOutput &b, int32_t rowB) {
    double worst = 0;
    for (int32_t v = 0; v < a.vocabSize; ++v)
      worst = std::max(worst, double(std::abs(a.row(rowA)[v] - b.row(rowB)[v])));
    return worst;
  }
  static double referenceDiff(const StepOutput &out, int32_t row, const std::vector<double> &ref,
                              int32_t position) {
    double worst = 0;
    for (int32_t v = 0; v < out.vocabSize; ++v)
      worst =
          std::max(worst, std::abs(double(out.row(row)[v]) - ref[position * out.vocabSize + v]));
    return worst;
  }
};

TEST_F(ExecutorTest, ReportsLimits) {
  auto executor = makeExecutor();
  ASSERT_TRUE(executor);
  const RunnerLimits &limits = executor->limits();
  EXPECT_EQ(limits.maxBatch, 4);
  EXPECT_EQ(limits.maxTokensPerStep, 64);
  EXPECT_EQ(limits.maxSeqLen, 64);
  EXPECT_EQ(limits.maxBlocksPerSeq, 16);
  EXPECT_EQ(limits.blockSize, 4);
  EXPECT_EQ(limits.numKvBlocks, kNumKvBlocks);
  EXPECT_EQ(limits.vocabSize, 64);
  // 2 layers x (K + V) x 2 kv heads x 4 tokens x 8 dims x 4 bytes.
  EXPECT_EQ(executor->kvBlockBytes(), 1024u);
}

TEST_F(ExecutorTest, PrefillMatchesDenseReference) {
  auto executor = makeExecutor();
  ASSERT_TRUE(executor);
  std::vector<int32_t> tokens = tokensOf(11, 1);
  StepOutput out = run(*executor, {{sequenceStep(tokens, 0, 11, {7, 2, 9}, LogitsWanted::kAll)}});
  ASSERT_EQ(out.numRows(), 11);
  EXPECT_EQ(out.vocabSize, 64);
  EXPECT_EQ(out.rowsPerSequence, std::vector<int32_t>{11});
  EXPECT_EQ(out.firstRowOfSequence, std::vector<int32_t>{0});
  std::vector<double> ref = testing::referenceLogits(*model_, tokens);
  for (int32_t t = 0; t < 11; ++t)
    EXPECT_LE(referenceDiff(out, t, ref, t), kReferenceTolerance) << "position " << t;
}

TEST_F(ExecutorTest, PrefillEqualsTokenByTokenDecode) {
  std::vector<int32_t> tokens = tokensOf(13, 2);
  std::vector<int32_t> blocks = {30, 4, 17, 1};
  auto prefill = makeExecutor();
  auto decode = makeExecutor();
  ASSERT_TRUE(prefill && decode);
  StepOutput all = run(*prefill, {{sequenceStep(tokens, 0, 13, blocks, LogitsWanted::kAll)}});
  ASSERT_EQ(all.numRows(), 13);
  std::vector<double> ref = testing::referenceLogits(*model_, tokens);
  for (int32_t t = 0; t < 13; ++t) {
    StepOutput one = run(*decode, {{sequenceStep(tokens, t, 1, blocks, LogitsWanted::kLast)}});
    ASSERT_EQ(one.numRows(), 1);
    EXPECT_LE(rowDiff(all, t, one, 0), kConsistencyTolerance) << "position " << t;
    EXPECT_LE(referenceDiff(one, 0, ref, t), kReferenceTolerance) << "position " << t;
  }
}

TEST_F(ExecutorTest, MixedBatchEqualsEachSequenceAlone) {
  // Shuffled, non-contiguous blocks, disjoint between sequences.
  std::vector<int32_t> pool(kNumKvBlocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  std::vector<std::vector<int32_t>> blocks;
  for (int s = 0; s < 4; ++s)
    blocks.emplace_back(pool.begin() + 5 * s, pool.begin() + 5 * s + 4);
  std::vector<std::vector<int32_t>> tokens = {tokensOf(7, 10), tokensOf(6, 11), tokensOf(9, 12),
                                              tokensOf(10, 13)};
  // History (step 1): seq 1 has 5 tokens cached, seq 2 a first chunk of 3, seq 3 has 9.
  // Step 2 (mixed): seq 0 full prefill, seq 1 decode, seq 2 second chunk of 6, seq 3 decode.
  struct Plan {
    int32_t cached;
    int32_t fresh;
    LogitsWanted logits;
  };
  const Plan plans[4] = {{0, 7, LogitsWanted::kAll},
                         {5, 1, LogitsWanted::kLast},
                         {3, 6, LogitsWanted::kAll},
                         {9, 1, LogitsWanted::kLast}};
  auto history = [&](int s) {
    return sequenceStep(tokens[s], 0, plans[s].cached, blocks[s], LogitsWanted::kNone);
  };
  auto step = [&](int s) {
    return sequenceStep(tokens[s], plans[s].cached, plans[s].fresh, blocks[s], plans[s].logits);
  };
  auto mixed = makeExecutor();
  ASSERT_TRUE(mixed);
  StepOutput first = run(*mixed, {{history(1), history(2), history(3)}});
  EXPECT_EQ(first.numRows(), 0);
  EXPECT_EQ(first.rowsPerSequence, (std::vector<int32_t>{0, 0, 0}));
  StepOutput out = run(*mixed, {{step(0), step(1), step(2), step(3)}});
  ASSERT_EQ(out.numRows(), 15);
  EXPECT_EQ(out.rowsPerSequence, (std::vector<int32_t>{7, 1, 6, 1}));
  EXPECT_EQ(out.firstRowOfSequence, (std::vector<int32_t>{0, 7, 8, 14}));
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    auto alone = makeExecutor();
    ASSERT_TRUE(alone);
    if (plans[s].cached > 0)
      run(*alone, {{history(s)}});
    StepOutput single = run(*alone, {{step(s)}});
    ASSERT_EQ(single.numRows(), out.rowsPerSequence[s]);
    std::vector<double> ref = testing::referenceLogits(*model_, tokens[s]);
    for (int32_t r = 0; r < single.numRows(); ++r) {
      int32_t position = plans[s].cached + plans[s].fresh - single.numRows() + r;
      EXPECT_LE(rowDiff(out, out.firstRowOfSequence[s] + r, single, r), kConsistencyTolerance);
      EXPECT_LE(referenceDiff(single, r, ref, position), kReferenceTolerance);
    }
  }
}

struct InvalidStep {
  const char *name;
  StepBatch batch;
  StatusCode code;
  std::string message;
};

TEST_F(ExecutorTest, InvalidStepsAreRejectedWithTheLimit) {
  auto executor = makeExecutor();
  ASSERT_TRUE(executor);
  auto seq = [](std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> blocks) {
    SequenceStep s;
    s.tokenIds = std::move(tokens);
    s.startPosition = start;
    s.blockTables = {std::move(blocks)};
    return s;
  };
  SequenceStep ok = seq({1, 2, 3}, 0, {0});
  std::vector<int32_t> sixteenBlocks(16, 1);
  std::vector<int32_t> seventeenBlocks(17, 1);
  const std::vector<InvalidStep> cases = {
      {"empty", {}, StatusCode::kInvalidArgument, "step has no sequences"},
      {"batch",
       {{ok, ok, ok, ok, ok}},
       StatusCode::kOutOfRange,
       "step has 5 sequences; the artifact was compiled with --max-batch 4"},
      {"tokens",
       {{seq(std::vector<int32_t>(40, 1), 0, {0}), seq(std::vector<int32_t>(25, 1), 0, {1})}},
       StatusCode::kOutOfRange,
       "step has 65 tokens; the artifact was compiled with --max-tokens-per-step 64"},
      {"no tokens",
       {{ok, seq({}, 0, {0})}},
       StatusCode::kInvalidArgument,
       "sequence 1 has no new tokens"},
      {"negative start",
       {{seq({1}, -1, {0})}},
       StatusCode::kInvalidArgument,
       "sequence 0 has startPosition -1; it must be >= 0"},
      {"seq len",
       {{seq({1, 2, 3, 4, 5}, 60, sixteenBlocks)}},
       StatusCode::kOutOfRange,
       "sequence 0 reaches 65 tokens (start 60 + 5 new); the artifact was compiled with "
       "--max-seq-len 64"},
      {"vocab",
       {{ok, seq({3, 64}, 0, {0})}},
       StatusCode::kInvalidArgument,
       "sequence 1 token 1 is id 64; the vocabulary has 64 tokens"},
      {"negative id",
       {{seq({-5}, 0, {0})}},
       StatusCode::kInvalidArgument,
       "sequence 0 token 0 is id -5; the vocabulary has 64 tokens"},
      {"short table",
       {{seq({1, 2, 3, 4, 5}, 0, {0})}},
       StatusCode::kInvalidArgument,
       "sequence 0 block table 0 has 1 blocks of 4 tokens, too few for its 5 positions"},
      {"long table",
       {{seq({1}, 0, seventeenBlocks)}},
       StatusCode::kOutOfRange,
       "sequence 0 block table 0 has 17 blocks; the artifact allows 16 per sequence "
       "(--max-seq-len / --kv-block-size)"},
      {"block id",
       {{seq({1, 2, 3, 4, 5}, 0, {3, 64})}},
       StatusCode::kInvalidArgument,
       "sequence 0 block table 0 entry 1 is block 64; the KV cache has 64 blocks"},
      {"negative block",
       {{seq({1}, 0, {-1})}},
       StatusCode::kInvalidArgument,
       "sequence 0 block table 0 entry 0 is block -1; the KV cache has 64 blocks"},
  };
  for (const InvalidStep &c : cases) {
    auto out = executor->execute(c.batch);
    ASSERT_FALSE(out.isOk()) << c.name;
    EXPECT_EQ(out.status().code(), c.code) << c.name;
    EXPECT_EQ(out.status().message(), c.message) << c.name;
  }
  // A rejected step leaves the executor usable.
  StepOutput out = run(*executor, {{ok}});
  EXPECT_EQ(out.numRows(), 1);
}

TEST_F(ExecutorTest, KvBlocksDerivedFromBytes) {
  ExecutorOptions options;
  options.kvCacheBytes = 10 * 1024 + 5;
  auto executor = Executor::create(*artifact_, *cpu_, options);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  EXPECT_EQ((*executor)->limits().numKvBlocks, 10);
  options.kvCacheBytes = 100;
  auto tooSmall = Executor::create(*artifact_, *cpu_, options);
  ASSERT_FALSE(tooSmall.isOk());
  EXPECT_EQ(tooSmall.status().message(), "KV cache of 100 bytes holds no block: one block (K and V "
                                         "of every layer it holds) is 1024 bytes");
}

TEST_F(ExecutorTest, CreateRejectsBadRankAndForeignTarget) {
  ExecutorOptions options;
  options.rank = 1;
  auto badRank = Executor::create(*artifact_, *cpu_, options);
  ASSERT_FALSE(badRank.isOk());
  EXPECT_NE(badRank.status().message().find("executor rank 1 is not a rank of"), std::string::npos);

  std::string dir = root_ + "/gpu-only.kiln";
  ASSERT_TRUE(testing::writeTinyLlamaArtifact(*model_, dir, [](schema::PlanT &plan) {
                plan.targets = {"sm_90a", "sm_80"};
              }).isOk());
  auto gpuOnly = Artifact::load(dir);
  ASSERT_TRUE(gpuOnly.isOk()) << gpuOnly.status().toString();
  auto executor = Executor::create(**gpuOnly, *cpu_, {});
  ASSERT_FALSE(executor.isOk());
  EXPECT_EQ(executor.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(executor.status().message(), "artifact '" + dir +
                                             "': compiled for targets sm_90a,sm_80; this "
                                             "device is 'cpu': recompile with --target cpu");
}

// A plan whose logits buffers hold max_logits_per_step = max_batch (4) rows: a step asking for
// every token's logits (kiln verify) runs as 4-token pieces and gives the rows of the one step a
// plan with room for them gives, within the consistency tolerance, and the dense reference's.
TEST_F(ExecutorTest, StepsAskingForMoreLogitsRowsThanThePlanHoldsRunInPieces) {
  const std::string dir = root_ + "/four-logits-rows.kiln";
  ASSERT_TRUE(testing::writeTinyLlamaArtifact(*model_, dir, [](schema::PlanT &plan) {
                plan.limits->max_logits_per_step = 4;
                for (auto &b : plan.ranks[0]->buffers)
                  if (b->rows == schema::RowScale::Logits && b->kind == schema::BufferKind::Activation) {
                    b->size_bytes = b->size_bytes / b->shape[0] * 4;
                    b->shape[0] = 4;
                  }
              }).isOk());
  auto small = Artifact::load(dir);
  ASSERT_TRUE(small.isOk()) << small.status().toString();
  ExecutorOptions options;
  options.numKvBlocks = kNumKvBlocks;
  auto pieces = Executor::create(**small, *cpu_, options);
  ASSERT_TRUE(pieces.isOk()) << pieces.status().toString();
  EXPECT_EQ((*pieces)->limits().maxLogitsPerStep, 4);
  auto whole = makeExecutor();
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->limits().maxLogitsPerStep, 64); // a plan without the field: every token

  const std::vector<int32_t> a = tokensOf(11, 5), b = tokensOf(3, 6);
  const StepBatch batch{{sequenceStep(b, 0, 3, {20, 21}, LogitsWanted::kLast),
                         sequenceStep(a, 0, 11, {7, 2, 9}, LogitsWanted::kAll)}};
  StepOutput split = run(**pieces, batch);
  StepOutput one = run(*whole, batch);
  ASSERT_EQ(split.numRows(), 12);
  EXPECT_EQ(split.rowsPerSequence, (std::vector<int32_t>{1, 11}));
  EXPECT_EQ(split.firstRowOfSequence, (std::vector<int32_t>{0, 1}));
  const std::vector<double> ref = testing::referenceLogits(*model_, a);
  for (int32_t t = 0; t < 11; ++t) {
    EXPECT_LE(rowDiff(split, 1 + t, one, 1 + t), kConsistencyTolerance) << "position " << t;
    EXPECT_LE(referenceDiff(split, 1 + t, ref, t), kReferenceTolerance) << "position " << t;
  }
  EXPECT_LE(rowDiff(split, 0, one, 0), kConsistencyTolerance);
  // profile() runs one step as given: more rows than the plan holds are refused, naming the flag.
  auto profiled = (*pieces)->profile(batch, 1);
  ASSERT_FALSE(profiled.isOk());
  EXPECT_NE(profiled.status().message().find("--max-logits-per-step 4"), std::string::npos)
      << profiled.status().message();
}

// An activation whose dtype disagrees with Plan.activation_dtype fails at load, naming the
// buffer. The same plan with every activation but the logits, and the KV cache, in BF16 (what
// `kiln compile --dtype bf16` writes) runs on the cpu backend: half the KV bytes per block, and
// logits that differ from the dense fp32 reference by bf16 rounding noise only.
TEST_F(ExecutorTest, CpuBackendRunsHalfActivations) {
  std::string mixed = root_ + "/bf16-act.kiln";
  ASSERT_TRUE(testing::writeTinyLlamaArtifact(*model_, mixed, [](schema::PlanT &plan) {
                for (auto &b : plan.ranks[0]->buffers)
                  if (b->name == "attn")
                    b->dtype = schema::DType::BF16;
              }).isOk());
  auto refused = Artifact::load(mixed);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find(
                "'attn' has dtype BF16 but the plan's activation_dtype is F32; every activation "
                "but the logits is stored in activation_dtype"),
            std::string::npos)
      << refused.status().message();

  std::string dir = root_ + "/bf16.kiln";
  ASSERT_TRUE(testing::writeTinyLlamaArtifact(*model_, dir, [](schema::PlanT &plan) {
                plan.activation_dtype = schema::DType::BF16;
                plan.kv_cache->dtype = schema::DType::BF16;
                const auto &rank = *plan.ranks[0];
                for (size_t i = 0; i < rank.buffers.size(); ++i)
                  if (rank.buffers[i]->kind == schema::BufferKind::Activation && i != rank.logits)
                    rank.buffers[i]->dtype = schema::DType::BF16;
              }).isOk());
  auto artifact = Artifact::load(dir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  ExecutorOptions options;
  options.numKvBlocks = 8;
  auto executor = Executor::create(**artifact, *cpu_, options);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  EXPECT_EQ((*executor)->kvBlockBytes(), 512u); // the fp32 plan's 1024 at 2 bytes an element
  std::vector<int32_t> tokens = tokensOf(11, 1);
  StepOutput out = run(**executor, {{sequenceStep(tokens, 0, 11, {7, 2, 5}, LogitsWanted::kAll)}});
  ASSERT_EQ(out.numRows(), 11);
  std::vector<double> ref = testing::referenceLogits(*model_, tokens);
  double worst = 0;
  for (int32_t t = 0; t < 11; ++t)
    worst = std::max(worst, referenceDiff(out, t, ref, t));
  // Logits reach |2.65|; every op rounds its output to bf16 (2^-9 relative), about ten roundings
  // per layer over 2 layers: measured 0.009, bound 0.03. Above 1e-4 (what the fp32 executor
  // meets), so the step really ran in bf16.
  EXPECT_GT(worst, 1e-4);
  EXPECT_LE(worst, 0.03) << "max |bf16 - fp32 reference| over 11 positions";
}

} // namespace
} // namespace kiln::rt
