// Greedy steps on the CUDA backend (label gpu): an artifact compiled by `kiln compile --target
// cpu,<this GPU's SM>` carries kiln_argmax_rows, so CudaDevice::canArgmaxRows() holds and a step
// whose sequences all ask for LogitsWanted::kArgmax copies one id per real row (padded decode
// rows and graph replays included) instead of the logits. Each step runs twice on one executor,
// as kLast and as kArgmax (rewriting the same KV slots with the same values): the ids must be the
// argmax of the logits bit for bit, and a mixed step must give the same logits as kLast. Skips
// without a GPU or without the kiln binary (KILN_BINARY_DIR/tools/kiln/kiln).
#include "runtime/exec/executor.h"

#include "runtime/hal/cuda/cuda_device.h"
#include "runtime/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

namespace kiln::rt {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kNumKvBlocks = 256;
constexpr int32_t kDecodeSteps = 4;

std::string kilnBinary() {
  return std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";
}

class CudaArgmaxExecutorGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    CudaDeviceOptions fixedLinears; // one executor, but no timing noise in what it picks
    fixedLinears.autotuneLinear = false;
    auto device = createCudaDevice(fixedLinears);
    if (!device.isOk())
      GTEST_SKIP() << "no CUDA device: " << device.status().message();
    cuda_ = std::move(device).value();
    if (!fs::exists(kilnBinary()))
      GTEST_SKIP() << "no kiln binary at " << kilnBinary() << " to compile the fixture";
    char pattern[] = "/tmp/kiln-cuda-argmax-XXXXXX";
    const char *made = mkdtemp(pattern);
    ASSERT_NE(made, nullptr);
    dir_ = made;
    const std::string out = dir_ + "/model.kiln";
    const std::string command = kilnBinary() + " compile " + std::string(KILN_TEST_DATA_DIR) +
                                "/models/tiny-llama -o " + out + " --target cpu," +
                                cuda_->target() + " --dtype bf16 --max-batch 32 --quiet > " + dir_ +
                                "/compile.log 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    auto artifact = Artifact::load(out);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
    artifact_ = std::move(artifact).value();
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }

  void checkGreedySteps(DecodeBuckets buckets, int32_t numSeqs);

  std::unique_ptr<Device> cuda_;
  std::unique_ptr<Artifact> artifact_;
  std::string dir_;
};

StepBatch withLogits(StepBatch batch, LogitsWanted first, LogitsWanted rest) {
  for (size_t s = 0; s < batch.sequences.size(); ++s)
    batch.sequences[s].logits = s == 0 ? first : rest;
  return batch;
}

void CudaArgmaxExecutorGpuTest::checkGreedySteps(DecodeBuckets buckets, int32_t numSeqs) {
  ExecutorOptions options;
  options.numKvBlocks = kNumKvBlocks;
  options.decodeBuckets = buckets;
  auto made = Executor::create(*artifact_, *cuda_, options);
  ASSERT_TRUE(made.isOk()) << made.status().toString();
  Executor &executor = **made;
  ASSERT_TRUE(cuda_->canArgmaxRows()) << "the artifact's module lacks kiln_argmax_rows";
  const int32_t vocab = executor.limits().vocabSize;
  std::mt19937 rng(static_cast<uint32_t>(numSeqs));
  std::vector<SequenceStep> seqs(numSeqs);
  for (int32_t s = 0; s < numSeqs; ++s) { // prefills: greedy ids for their last token
    seqs[s].tokenIds.resize(3 + s % 5);
    for (int32_t &t : seqs[s].tokenIds)
      t = static_cast<int32_t>(rng() % vocab);
    seqs[s].blockTables = {{2 * s, 2 * s + 1}};
    const StepBatch prefill{{seqs[s]}};
    auto rows = executor.execute(withLogits(prefill, LogitsWanted::kLast, LogitsWanted::kLast));
    auto ids = executor.execute(withLogits(prefill, LogitsWanted::kArgmax, LogitsWanted::kArgmax));
    ASSERT_TRUE(rows.isOk() && ids.isOk());
    ASSERT_EQ(ids->argmaxIds.size(), 1u);
    EXPECT_EQ(ids->argmaxIds[0], argmaxToken({rows->row(0), size_t(vocab)})) << "prefill " << s;
    seqs[s].startPosition = static_cast<int32_t>(seqs[s].tokenIds.size());
  }
  for (int32_t step = 0; step < kDecodeSteps; ++step) {
    StepBatch batch;
    for (SequenceStep &seq : seqs) {
      seq.tokenIds = {static_cast<int32_t>(rng() % vocab)};
      batch.sequences.push_back(seq);
      ++seq.startPosition;
    }
    auto rows = executor.execute(withLogits(batch, LogitsWanted::kLast, LogitsWanted::kLast));
    auto ids = executor.execute(withLogits(batch, LogitsWanted::kArgmax, LogitsWanted::kArgmax));
    auto mixed = executor.execute(withLogits(batch, LogitsWanted::kLast, LogitsWanted::kArgmax));
    ASSERT_TRUE(rows.isOk() && ids.isOk() && mixed.isOk());
    ASSERT_EQ(rows->numRows(), numSeqs);
    EXPECT_TRUE(ids->logits.empty());
    ASSERT_EQ(ids->argmaxIds.size(), size_t(numSeqs)) << "padded rows are not returned";
    for (int32_t r = 0; r < numSeqs; ++r)
      EXPECT_EQ(ids->argmaxIds[r], argmaxToken({rows->row(r), size_t(vocab)}))
          << "step " << step << " row " << r;
    EXPECT_TRUE(mixed->argmaxIds.empty());
    EXPECT_TRUE(mixed->logits == rows->logits) << "step " << step;
  }
}

TEST_F(CudaArgmaxExecutorGpuTest, GreedyStepsCopyTheIdsOfTheirRows) {
  for (int32_t numSeqs : {1, 5, 17}) {
    SCOPED_TRACE("batch of " + std::to_string(numSeqs) + ", decode graphs");
    checkGreedySteps(DecodeBuckets::kAuto, numSeqs);
  }
  SCOPED_TRACE("batch of 5, op by op");
  checkGreedySteps(DecodeBuckets::kOff, 5);
}

} // namespace
} // namespace kiln::rt
