// Decode steps padded to batch-size buckets (what CUDA graphs capture), checked on the cpu
// backend: the padding rows' step inputs are exactly as documented (step_inputs.h), padded steps
// give bit-identical logits to unpadded ones (the cpu kernels are batch invariant) and write
// nothing to the KV cache, and the executor's capture/replay flow works on a device whose
// "graphs" record ops and replay them.
#include "runtime/exec/executor.h"

#include "tests/runtime/exec/forwarding_device.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::rt {
namespace {

RunnerLimits limitsFor(int32_t maxBatch, int32_t maxTokensPerStep) {
  RunnerLimits limits;
  limits.maxBatch = maxBatch;
  limits.maxTokensPerStep = maxTokensPerStep;
  limits.maxSeqLen = 64;
  limits.maxBlocksPerSeq = 4;
  limits.blockSize = 16;
  limits.numKvBlocks = 32;
  limits.vocabSize = 100;
  return limits;
}

TEST(DecodeBatchBuckets, PowersOfTwoThenTheLargestBatch) {
  EXPECT_EQ(decodeBatchBuckets(limitsFor(32, 64)), (std::vector<int32_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(decodeBatchBuckets(limitsFor(48, 64)), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 48}));
  EXPECT_EQ(decodeBatchBuckets(limitsFor(1, 64)), (std::vector<int32_t>{1}));
  EXPECT_EQ(decodeBatchBuckets(limitsFor(3, 64)), (std::vector<int32_t>{1, 2, 3}));
  // A padded step has a token per sequence: tokens per step bound the buckets too.
  EXPECT_EQ(decodeBatchBuckets(limitsFor(64, 20)), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
}

SequenceStep decodeToken(int32_t token, int32_t position, std::vector<int32_t> blocks,
                         LogitsWanted logits = LogitsWanted::kLast) {
  SequenceStep seq;
  seq.tokenIds = {token};
  seq.startPosition = position;
  seq.blockTables = {std::move(blocks)};
  seq.logits = logits;
  return seq;
}

TEST(PadDecodeStep, PaddingRowsAreExactlyAsDocumented) {
  const RunnerLimits limits = limitsFor(8, 64);
  HostStepInputs inputs(limits);
  StepBatch batch;
  batch.sequences = {decodeToken(11, 20, {3, 5}), decodeToken(12, 0, {7}),
                     decodeToken(13, 33, {1, 2, 9}, LogitsWanted::kNone)};
  StepOutput out;
  ASSERT_TRUE(validateStep(batch, limits).isOk());
  const StepCounts real = fillStepInputs(batch, limits, inputs, out);
  ASSERT_TRUE(isDecodeOnly(real));
  ASSERT_EQ(real.numLogits, 2);
  // Stale values from an earlier, larger step must be overwritten.
  std::fill(inputs.blockTables[0].begin() + 3 * 4, inputs.blockTables[0].end(), 77);
  std::fill(inputs.logitsIndices.begin() + 2, inputs.logitsIndices.end(), 55);

  const StepCounts padded = padDecodeStep(real, 4, limits, inputs);
  EXPECT_EQ(padded.numTokens, 4);
  EXPECT_EQ(padded.numSeqs, 4);
  EXPECT_EQ(padded.numLogits, 4);
  EXPECT_EQ(padded.maxContextLen, 64); // the compiled max_seq_len, not this step's 34
  using K = schema::StepInputKind;
  auto filled = [&](K kind) {
    std::span<const int32_t> s = inputs.filled(kind, padded);
    return std::vector<int32_t>(s.begin(), s.end());
  };
  EXPECT_EQ(filled(K::TokenIds), (std::vector<int32_t>{11, 12, 13, 0}));
  EXPECT_EQ(filled(K::Positions), (std::vector<int32_t>{20, 0, 33, 0}));
  EXPECT_EQ(filled(K::SlotMapping), (std::vector<int32_t>{5 * 16 + 4, 7 * 16, 9 * 16 + 1, -1}));
  EXPECT_EQ(filled(K::QueryStartLoc), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(filled(K::ContextLens), (std::vector<int32_t>{21, 1, 34, 1}));
  EXPECT_EQ(filled(K::BlockTables), (std::vector<int32_t>{3, 5, 0, 0, //
                                                          7, 0, 0, 0, //
                                                          1, 2, 9, 0, //
                                                          0, 0, 0, 0}));
  EXPECT_EQ(filled(K::LogitsIndices), (std::vector<int32_t>{0, 1, 0, 0}));
  // The real rows' outputs are what fillStepInputs said.
  EXPECT_EQ(out.rowsPerSequence, (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(out.firstRowOfSequence, (std::vector<int32_t>{0, 1, 2}));
}

TEST(PadDecodeStep, AFullBucketIsUnchanged) {
  const RunnerLimits limits = limitsFor(8, 64);
  HostStepInputs inputs(limits);
  StepBatch batch;
  batch.sequences = {decodeToken(5, 3, {2}), decodeToken(6, 17, {4, 1})};
  StepOutput out;
  const StepCounts real = fillStepInputs(batch, limits, inputs, out);
  const HostStepInputs before = inputs;
  const StepCounts padded = padDecodeStep(real, 2, limits, inputs);
  EXPECT_EQ(padded.numSeqs, 2);
  EXPECT_EQ(padded.maxContextLen, 64);
  EXPECT_EQ(inputs.tokenIds, before.tokenIds);
  EXPECT_EQ(inputs.slotMapping, before.slotMapping);
  EXPECT_EQ(inputs.blockTables, before.blockTables);
  EXPECT_EQ(inputs.logitsIndices, before.logitsIndices);
}

// "Graphs" that record runOp calls while capturing and run them again on replay. Refuses (and
// counts) what a CUDA stream capture forbids: allocation, copies, synchronize.
class RecordingGraphDevice final : public testing::ForwardingDevice {
public:
  using ForwardingDevice::ForwardingDevice;
  struct Recording final : CapturedProgram {
    std::vector<std::pair<const PreparedOp *, StepCounts>> ops;
  };

  bool supportsGraphs() const override { return true; }
  Status beginCapture() override {
    if (recording_)
      return failedPrecondition("capture already begun");
    recording_ = std::make_unique<Recording>();
    ++captures;
    return okStatus();
  }
  Result<std::unique_ptr<CapturedProgram>> endCapture() override {
    if (!recording_)
      return failedPrecondition("no capture begun");
    if (failCaptures) {
      recording_.reset();
      return internalError("injected: graph instantiation failed");
    }
    return std::unique_ptr<CapturedProgram>(std::move(recording_));
  }
  Status replay(const CapturedProgram &program) override {
    ++replays;
    for (const auto &[op, counts] : static_cast<const Recording &>(program).ops)
      KILN_RETURN_IF_ERROR(inner_.runOp(*op, counts));
    return okStatus();
  }
  Status runOp(const PreparedOp &op, const StepCounts &counts) override {
    if (recording_) {
      recording_->ops.push_back({&op, counts});
      return okStatus();
    }
    return inner_.runOp(op, counts);
  }
  Result<DeviceMemory> allocate(size_t bytes, MemoryKind kind) override {
    KILN_RETURN_IF_ERROR(refuseWhileCapturing("allocate"));
    return inner_.allocate(bytes, kind);
  }
  Status copyToDevice(void *dst, const void *src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(refuseWhileCapturing("copyToDevice"));
    return inner_.copyToDevice(dst, src, bytes);
  }
  Status copyToHost(void *dst, const void *src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(refuseWhileCapturing("copyToHost"));
    return inner_.copyToHost(dst, src, bytes);
  }
  Status synchronize() override {
    KILN_RETURN_IF_ERROR(refuseWhileCapturing("synchronize"));
    return inner_.synchronize();
  }

  int captures = 0, replays = 0, violations = 0;
  bool failCaptures = false;

private:
  Status refuseWhileCapturing(const char *what) {
    if (!recording_)
      return okStatus();
    ++violations;
    return failedPrecondition(std::string(what) + " while capturing");
  }
  std::unique_ptr<Recording> recording_;
};

// A tiny Llama compiled for 32 sequences; every test runs the same schedule on executors with
// different DecodeBuckets and compares logits bit for bit.
class DecodeBucketTest : public testing::TinyLlamaOnCpuTest {
protected:
  static constexpr int32_t kNumKvBlocks = 80;

  static void SetUpTestSuite() {
    testing::TinyLlamaConfig config;
    config.maxBatch = 32;
    config.maxSeqLen = 32;
    config.maxTokensPerStep = 64;
    setUpTinyLlama("kiln-decode-bucket-test", config);
  }

  static std::unique_ptr<Executor> makeExecutor(Device &device, DecodeBuckets buckets,
                                                std::function<void(const std::string &)> log = {}) {
    ExecutorOptions options;
    options.numKvBlocks = kNumKvBlocks;
    options.decodeBuckets = buckets;
    options.log = std::move(log);
    auto executor = Executor::create(*artifact_, device, options);
    EXPECT_TRUE(executor.isOk()) << executor.status().toString();
    return executor.isOk() ? std::move(executor).value() : nullptr;
  }

  // `numSeqs` sequences (4 blocks of 4 positions each): prompts of 2..9 tokens prefilled one
  // sequence per step, then `decodeSteps` decode steps of every sequence (sequence 0 owns block 0,
  // which padding rows read: a padding write there would change the later steps). Returns every
  // step's logits.
  static std::vector<std::vector<float>> runSchedule(Executor &executor, int32_t numSeqs,
                                                     int32_t decodeSteps) {
    std::mt19937 rng(static_cast<uint32_t>(numSeqs));
    const int32_t blocksPerSeq = 4, blockSize = model_->config.blockSize;
    std::vector<SequenceStep> seqs(numSeqs);
    std::vector<std::vector<float>> logits;
    for (int32_t s = 0; s < numSeqs; ++s) {
      seqs[s].blockTables = {{}};
      for (int32_t b = 0; b < blocksPerSeq; ++b)
        seqs[s].blockTables[0].push_back(s * blocksPerSeq + b);
      seqs[s].tokenIds.resize(2 + s % 8);
      for (int32_t &t : seqs[s].tokenIds)
        t = static_cast<int32_t>(rng() % model_->config.vocab);
      auto out = executor.execute(StepBatch{{seqs[s]}});
      EXPECT_TRUE(out.isOk()) << out.status().toString();
      logits.push_back(out.isOk() ? out->logits : std::vector<float>());
      seqs[s].startPosition = static_cast<int32_t>(seqs[s].tokenIds.size());
    }
    for (int32_t step = 0; step < decodeSteps; ++step) {
      StepBatch batch;
      for (SequenceStep &seq : seqs) {
        seq.tokenIds = {static_cast<int32_t>(rng() % model_->config.vocab)};
        EXPECT_LE(seq.startPosition, blocksPerSeq * blockSize - 1);
        batch.sequences.push_back(seq);
        ++seq.startPosition;
      }
      auto out = executor.execute(batch);
      EXPECT_TRUE(out.isOk()) << out.status().toString();
      if (!out.isOk())
        return logits;
      EXPECT_EQ(out->numRows(), numSeqs);
      logits.push_back(out->logits);
    }
    return logits;
  }
};

TEST_F(DecodeBucketTest, TheCpuDeviceNeitherPadsNorCapturesByDefault) {
  std::unique_ptr<Executor> executor = makeExecutor(*cpu_, DecodeBuckets::kAuto);
  ASSERT_NE(executor, nullptr);
  EXPECT_TRUE(executor->decodeBuckets().empty());
  EXPECT_FALSE(executor->capturesDecodeGraphs());
  std::unique_ptr<Executor> padded = makeExecutor(*cpu_, DecodeBuckets::kPadOnly);
  ASSERT_NE(padded, nullptr);
  EXPECT_EQ(padded->decodeBuckets(), (std::vector<int32_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_FALSE(padded->capturesDecodeGraphs());
}

TEST_F(DecodeBucketTest, PaddedDecodeStepsGiveBitIdenticalLogits) {
  for (int32_t numSeqs : {1, 3, 5, 17}) {
    SCOPED_TRACE("batch of " + std::to_string(numSeqs));
    std::unique_ptr<Executor> plain = makeExecutor(*cpu_, DecodeBuckets::kOff);
    std::unique_ptr<Executor> padded = makeExecutor(*cpu_, DecodeBuckets::kPadOnly);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(padded, nullptr);
    const auto expected = runSchedule(*plain, numSeqs, 3);
    const auto actual = runSchedule(*padded, numSeqs, 3);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t step = 0; step < expected.size(); ++step) {
      ASSERT_EQ(actual[step].size(), expected[step].size()) << "step " << step;
      EXPECT_TRUE(actual[step] == expected[step]) << "step " << step << " differs";
    }
  }
}

TEST_F(DecodeBucketTest, EachBucketIsCapturedOnceThenReplayed) {
  RecordingGraphDevice device(*cpu_);
  std::unique_ptr<Executor> graphs = makeExecutor(device, DecodeBuckets::kAuto);
  std::unique_ptr<Executor> plain = makeExecutor(*cpu_, DecodeBuckets::kOff);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_TRUE(graphs->capturesDecodeGraphs());
  EXPECT_EQ(graphs->decodeBuckets(), (std::vector<int32_t>{1, 2, 4, 8, 16, 32}));

  int expectedCaptures = 0, expectedReplays = 0;
  for (int32_t numSeqs : {3, 4, 17}) { // buckets 4, 4 again, 32
    SCOPED_TRACE("batch of " + std::to_string(numSeqs));
    const int32_t decodeSteps = 4;
    const auto expected = runSchedule(*plain, numSeqs, decodeSteps);
    const auto actual = runSchedule(*graphs, numSeqs, decodeSteps);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t step = 0; step < expected.size(); ++step)
      EXPECT_TRUE(actual[step] == expected[step]) << "step " << step << " differs";
    // The first decode step of a new bucket runs uncaptured, then captures; the rest replay.
    const bool newBucket = numSeqs != 4;
    expectedCaptures += newBucket ? 1 : 0;
    expectedReplays += newBucket ? decodeSteps - 1 : decodeSteps;
    EXPECT_EQ(device.captures, expectedCaptures);
    EXPECT_EQ(device.replays, expectedReplays);
  }
  EXPECT_EQ(device.violations, 0); // no copy, allocation or synchronize while capturing
}

TEST_F(DecodeBucketTest, AFailedCaptureKeepsTheBucketRunningWithoutAGraph) {
  RecordingGraphDevice device(*cpu_);
  device.failCaptures = true;
  std::vector<std::string> logged;
  std::unique_ptr<Executor> graphs = makeExecutor(
      device, DecodeBuckets::kAuto, [&](const std::string &line) { logged.push_back(line); });
  std::unique_ptr<Executor> plain = makeExecutor(*cpu_, DecodeBuckets::kOff);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(plain, nullptr);
  const auto expected = runSchedule(*plain, 3, 4);
  const auto actual = runSchedule(*graphs, 3, 4); // every step succeeds (runSchedule asserts)
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_TRUE(actual[step] == expected[step]) << "step " << step << " differs";
  EXPECT_EQ(device.captures, 1); // tried once for bucket 4, then never again
  EXPECT_EQ(device.replays, 0);
  EXPECT_EQ(graphs->graphFailure().message(),
            "capturing the decode graph of batch bucket 4: injected: graph instantiation failed");
  EXPECT_EQ(logged,
            std::vector<std::string>{"capturing the decode graph of batch bucket 4: injected: "
                                     "graph instantiation failed; this batch size runs "
                                     "without a graph"});
}

} // namespace
} // namespace kiln::rt
