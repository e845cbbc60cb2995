// Four sequences of different lengths in one step (fresh prefill, chunked prefill continuing a
// cached prefix, decode, a one-token prompt) give the same logits (<= 1e-5) as each run alone:
// continuous batching must not change any request's output.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace kiln::e2e {
namespace {

struct Sequence {
  std::vector<int32_t> history;  // already in the cache before the batched step
  std::vector<int32_t> fresh;    // new tokens in the batched step
  std::vector<std::vector<int32_t>> blocks; // per KV cache group
};

std::vector<Sequence> makeSequences(int32_t vocab, int32_t blockSize, int32_t kvGroups) {
  std::mt19937 rng(1234);
  auto ids = [&](int n) {
    std::vector<int32_t> v(n);
    for (int32_t &id : v)
      id = static_cast<int32_t>(rng() % vocab);
    return v;
  };
  std::vector<Sequence> seqs = {{{}, ids(9), {}},       // fresh prefill
                                {ids(6), ids(5), {}},   // chunked prefill after a cached prefix
                                {ids(13), ids(1), {}},  // decode
                                {{}, ids(1), {}}};      // a one-token prompt
  // Shuffled, non-contiguous blocks so paging is really exercised.
  std::vector<int32_t> pool(32);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (Sequence &s : seqs) {
    size_t tokens = s.history.size() + s.fresh.size();
    s.blocks.resize(kvGroups);
    for (size_t b = 0; b * blockSize < tokens; ++b)
      for (std::vector<int32_t> &table : s.blocks)
        table.push_back(pool[next++]);
  }
  return seqs;
}

rt::SequenceStep stepOf(const Sequence &s, bool history) {
  rt::SequenceStep step;
  step.tokenIds = history ? s.history : s.fresh;
  step.startPosition = history ? 0 : static_cast<int32_t>(s.history.size());
  step.blockTables = s.blocks;
  step.logits = history ? rt::LogitsWanted::kNone : rt::LogitsWanted::kAll;
  return step;
}

void checkBatchInvariance(const std::string &modelDir) {
  LoadedArtifact model = loadForTest(compileForTest(modelDir), 32);
  ASSERT_NE(model.executor, nullptr);
  rt::Executor &executor = *model.executor;
  std::vector<Sequence> seqs =
      makeSequences(executor.limits().vocabSize, executor.limits().blockSize,
                    rt::kvGroupCount(executor.limits()));
  for (const Sequence &s : seqs)
    if (!s.history.empty())
      ASSERT_TRUE(executor.execute(rt::StepBatch{{stepOf(s, true)}}).isOk());
  rt::StepBatch batch;
  for (const Sequence &s : seqs)
    batch.sequences.push_back(stepOf(s, false));
  auto together = executor.execute(batch);
  ASSERT_TRUE(together.isOk()) << together.status().toString();
  const int32_t vocab = together->vocabSize;
  for (size_t i = 0; i < seqs.size(); ++i) {
    // Re-running a step rewrites the same K/V values into the same slots.
    auto alone = executor.execute(rt::StepBatch{{stepOf(seqs[i], false)}});
    ASSERT_TRUE(alone.isOk()) << alone.status().toString();
    ASSERT_EQ(together->rowsPerSequence[i], static_cast<int32_t>(seqs[i].fresh.size()));
    for (int32_t r = 0; r < alone->numRows(); ++r)
      EXPECT_LE(maxAbsDiff(alone->row(r), together->row(together->firstRowOfSequence[i] + r),
                           vocab),
                1e-5f)
          << "sequence " << i << " row " << r;
  }
}

TEST(BatchInvariance, TinyLlamaFourSequencesInOneStep) {
  checkBatchInvariance(std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama");
}

TEST(BatchInvariance, TinyStories656KFourSequencesInOneStep) {
  auto dir = assetModelDir("models/tinystories-656K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/tinystories-656K-hf is absent";
  checkBatchInvariance(*dir);
}

// Every other family: windows, biases, q/k norms, fused checkpoint tensors and the rope modes
// that follow each sequence's length (the four sequences sit on both sides of tiny-qwen2-dynamic's
// switch at 12 and tiny-phi3-longrope's at 16), Gemma's soft-caps and local / global rope, and
// mixture-of-experts routing (a token's experts and sums never depend on the others).
TEST(BatchInvariance, OtherFamiliesFourSequencesInOneStep) {
  for (const char *fixture : {"tiny-mistral", "tiny-qwen2", "tiny-qwen2-dynamic", "tiny-qwen3",
                              "tiny-phi3", "tiny-phi3-longrope", "tiny-gemma2", "tiny-gemma3",
                              "tiny-mixtral", "tiny-qwen3-moe", "tiny-qwen2-moe"}) {
    SCOPED_TRACE(fixture);
    checkBatchInvariance(std::string(KILN_TEST_DATA_DIR) + "/models/" + fixture);
  }
}

} // namespace
} // namespace kiln::e2e
