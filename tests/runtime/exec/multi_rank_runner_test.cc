// MultiRankRunner on a hand-built 2-rank plan (no compiler needed): a column-parallel linear, a
// row-parallel linear + AllReduce and a vocab-parallel lm_head + AllGather must equal the dense
// computation; a rank that fails or stalls fails the step naming the rank, and the runner steps
// normally afterwards, with the cpu and the staged communicators alike; the staged one's logits
// equal the cpu one's bit for bit; which communicator runs is logged in one line; a communicator
// that queues behind the device's work (NCCL) spares the wait for the device before each
// collective.
#include "runtime/artifact/artifact_writer.h"
#include "runtime/exec/multi_rank_runner.h"
#include "runtime/hal/cpu_device.h"
#include "tests/runtime/exec/forwarding_device.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>

namespace kiln::rt {
namespace {

using namespace std::chrono_literals;
using testing::makeTempDir;

constexpr int kTp = 2, kVocab = 14, kHidden = 8, kMaxTokens = 16; // vocab 14: a padded shard
constexpr int kShard = (kVocab + kTp - 1) / kTp;

// Dense weights; rank r's shards are slices of them.
struct ToyModel {
  std::vector<float> embed, up, down, head; // [V,H], [H,H], [H,H], [V,H]
};

ToyModel makeToy() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float &x : v)
      x = dist(rng);
    return v;
  };
  return {fill(kVocab * kHidden), fill(kHidden * kHidden), fill(kHidden * kHidden),
          fill(kVocab * kHidden)};
}

// rows [begin, begin+count) x cols [colBegin, colBegin+cols) of a row-major [*, width] matrix;
// rows past `rowsTotal` are zeros.
std::vector<float> slice(const std::vector<float> &m, int width, int rowsTotal, int begin,
                         int count, int colBegin, int cols) {
  std::vector<float> out(size_t(count) * cols, 0.0f);
  for (int i = 0; i < count && begin + i < rowsTotal; ++i)
    for (int j = 0; j < cols; ++j)
      out[size_t(i) * cols + j] = m[size_t(begin + i) * width + colBegin + j];
  return out;
}

std::unique_ptr<schema::BufferT> buffer(const std::string &name, schema::BufferKind kind,
                                        schema::RowScale rows, std::vector<uint64_t> shape) {
  auto b = std::make_unique<schema::BufferT>();
  b->name = name;
  b->kind = kind;
  b->rows = rows;
  b->shape = std::move(shape);
  b->dtype = kind == schema::BufferKind::StepInput ? schema::DType::I32 : schema::DType::F32;
  b->size_bytes = b->shape[0] * (b->shape.size() > 1 ? b->shape[1] : 1) * 4;
  return b;
}

template <typename Params>
void addOp(schema::RankT &rank, const std::string &name, Params params, std::vector<uint32_t> in,
           uint32_t out) {
  auto op = std::make_unique<schema::OpT>();
  op->name = name;
  op->params.Set(std::move(params));
  op->inputs = std::move(in);
  op->outputs = {out};
  rank.program.push_back(std::move(op));
}

std::unique_ptr<schema::RankT> toyRank(uint32_t r) {
  using K = schema::BufferKind;
  using R = schema::RowScale;
  auto rank = std::make_unique<schema::RankT>();
  rank->rank = r;
  rank->buffers.push_back(buffer("step.token_ids", K::StepInput, R::Tokens, {kMaxTokens}));
  rank->buffers.back()->step_input = schema::StepInputKind::TokenIds;
  rank->buffers.push_back(buffer("step.logits_indices", K::StepInput, R::Logits, {kMaxTokens}));
  rank->buffers.back()->step_input = schema::StepInputKind::LogitsIndices;
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> weights = {
      {"embed", {kVocab, kHidden}},
      {"up", {kHidden / kTp, kHidden}},
      {"down", {kHidden, kHidden / kTp}},
      {"head", {kShard, kHidden}}};
  for (size_t w = 0; w < weights.size(); ++w) {
    rank->buffers.push_back(buffer(weights[w].first, K::Weight, R::Fixed, weights[w].second));
    rank->buffers.back()->weight = static_cast<int32_t>(w);
  }
  const std::vector<std::tuple<std::string, R, uint64_t>> activations = {
      {"e", R::Tokens, kHidden},    {"g", R::Logits, kHidden}, {"u", R::Logits, kHidden / kTp},
      {"d", R::Logits, kHidden},    {"y", R::Logits, kHidden}, {"l", R::Logits, kShard},
      {"logits", R::Logits, kVocab}};
  uint64_t region = kMaxTokens * kVocab * 4;
  for (size_t a = 0; a < activations.size(); ++a) {
    auto &[name, rows, width] = activations[a];
    rank->buffers.push_back(buffer(name, K::Activation, rows, {kMaxTokens, width}));
    rank->buffers.back()->arena_offset = a * region;
  }
  rank->arena_bytes = activations.size() * region;
  // Buffers: 0 ids, 1 logits_indices, 2 embed, 3 up, 4 down, 5 head, 6 e .. 12 logits.
  addOp(*rank, "embed", schema::EmbeddingParamsT{}, {0, 2}, 6);
  addOp(*rank, "rows", schema::GatherRowsParamsT{}, {6, 1}, 7);
  addOp(*rank, "up", schema::LinearParamsT{}, {7, 3}, 8);
  addOp(*rank, "down", schema::LinearParamsT{}, {8, 4}, 9);
  addOp(*rank, "down.all_reduce", schema::AllReduceParamsT{}, {9}, 10);
  addOp(*rank, "lm_head", schema::LinearParamsT{}, {10, 5}, 11);
  addOp(*rank, "lm_head.all_gather", schema::AllGatherParamsT{}, {11}, 12);
  rank->logits = 12;
  return rank;
}

WeightSource source(const std::string &name, std::vector<uint64_t> shape, std::vector<float> v) {
  return {name, schema::DType::F32, std::move(shape), [v](std::vector<uint8_t> &bytes) {
            bytes.resize(v.size() * 4);
            std::memcpy(bytes.data(), v.data(), bytes.size());
            return okStatus();
          }};
}

std::string writeToyArtifact(const ToyModel &m) {
  testing::TinyLlamaConfig config;
  config.vocab = kVocab;
  config.maxTokensPerStep = kMaxTokens;
  ArtifactContents contents;
  contents.plan = testing::buildTinyLlamaPlan(testing::makeTinyLlama(config));
  contents.plan.ranks.clear();
  contents.plan.tp = kTp;
  int half = kHidden / kTp;
  for (int r = 0; r < kTp; ++r) {
    contents.plan.ranks.push_back(toyRank(r));
    contents.rankWeights.push_back(
        {source("embed", {kVocab, kHidden}, m.embed),
         source("up", {uint64_t(half), kHidden},
                slice(m.up, kHidden, kHidden, r * half, half, 0, kHidden)),
         source("down", {kHidden, uint64_t(half)},
                slice(m.down, kHidden, kHidden, 0, kHidden, r * half, half)),
         source("head", {kShard, kHidden},
                slice(m.head, kHidden, kVocab, r * kShard, kShard, 0, kHidden))});
  }
  std::string dir = makeTempDir("multi-rank") + "/toy.kiln";
  Status status = writeArtifact(contents, dir);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return dir;
}

std::vector<double> referenceLogits(const ToyModel &m, int32_t token) {
  auto matvec = [](const std::vector<float> &w, const std::vector<double> &x, int out) {
    std::vector<double> y(out, 0.0);
    for (int i = 0; i < out; ++i)
      for (size_t j = 0; j < x.size(); ++j)
        y[i] += double(w[i * x.size() + j]) * x[j];
    return y;
  };
  std::vector<double> x(m.embed.begin() + token * kHidden, m.embed.begin() + (token + 1) * kHidden);
  return matvec(m.head, matvec(m.down, matvec(m.up, x, kHidden), kHidden), kVocab);
}

StepBatch toyBatch() {
  StepBatch batch;
  for (std::vector<int32_t> ids : {std::vector<int32_t>{3, 13, 5}, std::vector<int32_t>{11}}) {
    SequenceStep step;
    step.tokenIds = ids;
    step.blockTables = {{0}};
    step.logits = LogitsWanted::kAll;
    batch.sequences.push_back(step);
  }
  return batch;
}

void expectReference(const ToyModel &m, const Result<StepOutput> &out) {
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  const std::vector<int32_t> tokens = {3, 13, 5, 11};
  ASSERT_EQ(out->numRows(), 4);
  ASSERT_EQ(out->vocabSize, kVocab);
  for (int row = 0; row < 4; ++row) {
    std::vector<double> want = referenceLogits(m, tokens[row]);
    for (int v = 0; v < kVocab; ++v)
      EXPECT_NEAR(out->row(row)[v], want[v], 1e-5) << "row " << row << " vocab " << v;
  }
}

// Holds a stalled rank inside its op until the test opens it, so a stall lasts exactly as long as
// the test needs whatever the machine's speed.
class Gate {
public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  // False when `guard` passed first: the test failed to open it (a failure guard, never a
  // condition of a passing run).
  bool waitOpen(std::chrono::milliseconds guard) {
    std::unique_lock<std::mutex> lock(mutex_);
    return opened_.wait_for(lock, guard, [&] { return open_; });
  }

private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// Opens the gate when the test body leaves (also on a failed ASSERT), before the runner it is
// declared after joins its rank threads.
struct OpenOnExit {
  Gate &gate;
  ~OpenOnExit() { gate.open(); }
};

enum class Fault { kFail, kStall };
constexpr auto kStallGuard = 60000ms;

// A cpu device that, while armed, fails the op named `opName`, or stalls in it until `gate` opens
// (setting `stallGuardExpired` if that takes kStallGuard).
class FaultyDevice final : public testing::ForwardingDevice {
public:
  FaultyDevice(std::string opName, Fault fault, std::atomic<bool> &armed, Gate &gate,
               std::atomic<bool> &stallGuardExpired)
      : ForwardingDevice(std::make_unique<CpuDevice>()), opName_(std::move(opName)), fault_(fault),
        armed_(armed), gate_(gate), stallGuardExpired_(stallGuardExpired) {}
  Result<std::unique_ptr<PreparedOp>> prepareOp(const BoundOp &op) override {
    KILN_ASSIGN_OR_RETURN(auto prepared, inner_.prepareOp(op));
    if (op.op->name()->str() == opName_)
      faulty_ = prepared.get();
    return prepared;
  }
  Status runOp(const PreparedOp &op, const StepCounts &counts) override {
    if (&op == faulty_ && armed_) {
      if (fault_ == Fault::kFail)
        return internalError("injected failure in op '" + opName_ + "'");
      if (!gate_.waitOpen(kStallGuard))
        stallGuardExpired_ = true;
    }
    return inner_.runOp(op, counts);
  }

private:
  std::string opName_;
  Fault fault_;
  std::atomic<bool> &armed_;
  Gate &gate_;
  std::atomic<bool> &stallGuardExpired_;
  const PreparedOp *faulty_ = nullptr;
};

class MultiRankRunnerTest : public ::testing::Test {
protected:
  void SetUp() override {
    model_ = makeToy();
    auto artifact = Artifact::load(writeToyArtifact(model_));
    ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
    artifact_ = std::move(*artifact);
  }
  // Rank 1 gets a FaultyDevice; rank 0 a plain cpu device.
  MultiRankOptions faultyOptions(Fault fault, std::chrono::milliseconds timeout,
                                 CollectiveBackend collectives = CollectiveBackend::kAuto) {
    MultiRankOptions options;
    options.executor.numKvBlocks = 4;
    options.collectiveTimeout = timeout;
    options.collectives = collectives;
    options.deviceFactory = [this, fault](int rank) -> Result<std::unique_ptr<Device>> {
      if (rank == 1)
        return std::unique_ptr<Device>(
            std::make_unique<FaultyDevice>("up", fault, armed_, gate_, stallGuardExpired_));
      return createDevice("cpu");
    };
    return options;
  }

  ToyModel model_;
  std::unique_ptr<Artifact> artifact_;
  std::atomic<bool> armed_{false};
  Gate gate_;
  std::atomic<bool> stallGuardExpired_{false};
};

TEST_F(MultiRankRunnerTest, ShardedStepEqualsTheDenseComputation) {
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  EXPECT_EQ((*runner)->numRanks(), 2);
  EXPECT_EQ((*runner)->limits().vocabSize, kVocab);
  EXPECT_EQ((*runner)->limits().numKvBlocks, 4);
  for (int step = 0; step < 3; ++step)
    expectReference(model_, (*runner)->execute(toyBatch()));
  // Limits are checked before any rank runs.
  StepBatch tooLong;
  tooLong.sequences.push_back({std::vector<int32_t>(kMaxTokens + 1, 1), 0, {{0, 1, 2, 3, 4}}});
  EXPECT_FALSE((*runner)->execute(tooLong).isOk());
  expectReference(model_, (*runner)->execute(toyBatch()));
}

// A greedy step comes back as rank 0's ids, equal to the argmax of the rows a kLast step gives.
TEST_F(MultiRankRunnerTest, GreedyStepsReturnRankZerosArgmaxIds) {
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  StepBatch batch = toyBatch();
  for (SequenceStep &step : batch.sequences)
    step.logits = LogitsWanted::kLast;
  Result<StepOutput> rows = (*runner)->execute(batch);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->numRows(), 2);
  for (SequenceStep &step : batch.sequences)
    step.logits = LogitsWanted::kArgmax;
  Result<StepOutput> ids = (*runner)->execute(batch);
  ASSERT_TRUE(ids.isOk()) << ids.status().toString();
  EXPECT_TRUE(ids->logits.empty());
  ASSERT_EQ(ids->argmaxIds.size(), 2u);
  EXPECT_EQ(ids->rowsPerSequence, rows->rowsPerSequence);
  for (int32_t r = 0; r < 2; ++r) { // finite logits: max_element's first maximum is the argmax
    const float *row = rows->row(r);
    EXPECT_EQ(ids->argmaxIds[r], std::max_element(row, row + kVocab) - row) << "row " << r;
  }
}

TEST_F(MultiRankRunnerTest, OneExecutorAloneIsRejectedWithAClearError) {
  auto device = createDevice("cpu");
  ASSERT_TRUE(device.isOk());
  auto executor = Executor::create(*artifact_, **device);
  ASSERT_FALSE(executor.isOk());
  EXPECT_NE(executor.status().message().find("2-way tensor parallelism"), std::string::npos)
      << executor.status().message();
}

// The staged communicator runs the cpu one's barrier: the same failures give the same errors.
class MultiRankFailureTest : public MultiRankRunnerTest,
                             public ::testing::WithParamInterface<CollectiveBackend> {};

// Rank 1 fails before the first collective, where rank 0 waits for it (or finds the abort on
// arriving). The collective timeout is long, so only the abort can end that wait sooner: a step
// that returns before the timeout was ended by the abort (a timed-out wait lasts all of it).
TEST_P(MultiRankFailureTest, AFailingRankFailsTheStepPromptlyAndTheNextStepWorks) {
  constexpr auto kTimeout = 60000ms;
  auto runner =
      MultiRankRunner::create(*artifact_, faultyOptions(Fault::kFail, kTimeout, GetParam()));
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  EXPECT_EQ((*runner)->collectives(), GetParam());
  armed_ = true;
  auto begin = std::chrono::steady_clock::now();
  auto failed = (*runner)->execute(toyBatch());
  EXPECT_LT(std::chrono::steady_clock::now() - begin, kTimeout); // the abort, not the timeout
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().message(), "rank 1: injected failure in op 'up'");
  armed_ = false;
  expectReference(model_, (*runner)->execute(toyBatch()));
}

// Steps until the runner has every rank back: each try that finds a rank still inside the failed
// step has waited one collective timeout for it. Bounded by a generous guard.
Result<StepOutput> executeOnceIdle(MultiRankRunner &runner) {
  const auto guard = std::chrono::steady_clock::now() + 30s;
  while (true) {
    Result<StepOutput> out = runner.execute(toyBatch());
    if (out.isOk() ||
        out.status().message().find("still inside an earlier failed step") == std::string::npos ||
        std::chrono::steady_clock::now() > guard)
      return out;
  }
}

// Rank 1 stalls inside its op until the test opens the gate: rank 0's collective times out
// naming it, and the step returns while rank 1 is still held (had the runner waited out the
// stall, it could only have returned once the gate's guard expired).
TEST_P(MultiRankFailureTest, AStalledRankTimesOutNamingItAndTheRunnerRecovers) {
  auto runner =
      MultiRankRunner::create(*artifact_, faultyOptions(Fault::kStall, 150ms, GetParam()));
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  OpenOnExit release{gate_};
  armed_ = true;
  auto failed = (*runner)->execute(toyBatch());
  EXPECT_FALSE(stallGuardExpired_) << "the step waited for the stalled rank";
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("rank 0 waited 150 ms for rank(s) 1"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("1 rank(s) did not finish the failed step"),
            std::string::npos)
      << failed.status().message();
  // Rank 1 is still held: the next step says so instead of hanging.
  auto busy = (*runner)->execute(toyBatch());
  ASSERT_FALSE(busy.isOk());
  EXPECT_NE(busy.status().message().find("still inside an earlier failed step"), std::string::npos)
      << busy.status().message();
  armed_ = false;
  gate_.open();
  expectReference(model_, executeOnceIdle(**runner));
  EXPECT_FALSE(stallGuardExpired_);
}

INSTANTIATE_TEST_SUITE_P(Collectives, MultiRankFailureTest,
                         ::testing::Values(CollectiveBackend::kCpu, CollectiveBackend::kStaged),
                         [](const auto &info) {
                           return info.param == CollectiveBackend::kCpu ? "Cpu" : "Staged";
                         });

// Another communicator, scripted: while `fail`, rank 1's all_gather fails as a broken link would;
// `queued` claims, as NCCL does, that the collectives queue behind the device's work.
class ScriptedCommunicator final : public Communicator {
public:
  explicit ScriptedCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int worldSize() const override { return inner_->worldSize(); }
  bool supports(DeviceKind kind) const override { return inner_->supports(kind); }
  bool queuesBehindDeviceWork() const override { return queued; }
  Status allReduceSum(int rank, const void *in, void *out, size_t count,
                      schema::DType dtype) override {
    return inner_->allReduceSum(rank, in, out, count, dtype);
  }
  Status allGatherColumns(int rank, const void *in, void *out, size_t rows, size_t inWidth,
                          size_t outWidth, schema::DType dtype) override {
    if (rank == 1 && fail)
      return unavailable("injected: link to rank 0 is down");
    return inner_->allGatherColumns(rank, in, out, rows, inWidth, outWidth, dtype);
  }
  void abort(int rank, const Status &reason) override { inner_->abort(rank, reason); }
  Status failure() const override { return inner_->failure(); }
  void reset() override { inner_->reset(); }
  std::atomic<bool> fail{true};
  bool queued = false;

private:
  std::shared_ptr<Communicator> inner_;
};

TEST_F(MultiRankRunnerTest, ACommunicatorFailureFailsTheStepNamingTheRank) {
  auto comm = std::make_shared<ScriptedCommunicator>(std::make_shared<CpuCommunicator>(2, 30000ms));
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  options.communicator = comm;
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  auto failed = (*runner)->execute(toyBatch());
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().message(), "rank 1: injected: link to rank 0 is down");
  comm->fail = false;
  expectReference(model_, (*runner)->execute(toyBatch()));
}

// A cpu device counting synchronize() calls.
class CountingSyncDevice final : public testing::ForwardingDevice {
public:
  explicit CountingSyncDevice(std::atomic<int> &syncs)
      : ForwardingDevice(std::make_unique<CpuDevice>()), syncs_(syncs) {}
  Status synchronize() override {
    ++syncs_;
    return inner_.synchronize();
  }

private:
  std::atomic<int> &syncs_;
};

// The toy program has two collectives (an AllReduce and an AllGather). Before each, a rank waits
// for its device unless the communicator queues behind the device's work; every rank also waits
// once before copying its logits out. So a step costs 2 x 3 waits, or 2 x 1 with NCCL-like
// queueing, and the logits are the same.
TEST_F(MultiRankRunnerTest, CollectivesQueuedBehindTheDevicesWorkSkipTheWaitBeforeEach) {
  for (bool queued : {false, true}) {
    std::atomic<int> syncs{0};
    auto comm =
        std::make_shared<ScriptedCommunicator>(std::make_shared<CpuCommunicator>(2, 30000ms));
    comm->fail = false;
    comm->queued = queued;
    MultiRankOptions options;
    options.executor.numKvBlocks = 4;
    options.communicator = comm;
    options.deviceFactory = [&syncs](int) -> Result<std::unique_ptr<Device>> {
      return std::unique_ptr<Device>(std::make_unique<CountingSyncDevice>(syncs));
    };
    auto runner = MultiRankRunner::create(*artifact_, options);
    ASSERT_TRUE(runner.isOk()) << runner.status().toString();
    const int atLoad = syncs;
    expectReference(model_, (*runner)->execute(toyBatch()));
    EXPECT_EQ(syncs - atLoad, queued ? 2 : 6) << (queued ? "queued" : "not queued");
  }
}

// The staged communicator stages through host buffers but does the cpu communicator's math:
// the logits are bit-identical, step after step.
TEST_F(MultiRankRunnerTest, StagedCollectivesGiveTheCpuCommunicatorsLogitsBitForBit) {
  std::vector<std::vector<float>> logits;
  for (CollectiveBackend backend : {CollectiveBackend::kCpu, CollectiveBackend::kStaged}) {
    MultiRankOptions options;
    options.executor.numKvBlocks = 4;
    options.collectives = backend;
    auto runner = MultiRankRunner::create(*artifact_, options);
    ASSERT_TRUE(runner.isOk()) << runner.status().toString();
    EXPECT_EQ((*runner)->collectives(), backend);
    for (int step = 0; step < 2; ++step) {
      auto out = (*runner)->execute(toyBatch());
      expectReference(model_, out);
      if (step == 1)
        logits.push_back(out->logits);
    }
  }
  ASSERT_EQ(logits.size(), 2u);
  EXPECT_EQ(logits[0], logits[1]);
}

TEST_F(MultiRankRunnerTest, AutoPicksTheCpuCommunicatorAndSaysSoInOneLine) {
  std::vector<std::string> lines;
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  options.log = [&](const std::string &line) { lines.push_back(line); };
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_TRUE(runner.isOk()) << runner.status().toString();
  EXPECT_EQ((*runner)->collectives(), CollectiveBackend::kCpu);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tensor parallelism: 2 ranks on cpu, cpu; collectives: cpu (shared host "
                      "memory), every rank is on the cpu");
}

TEST_F(MultiRankRunnerTest, NcclOnCpuDevicesFailsNamingTheRank) {
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  options.collectives = CollectiveBackend::kNccl;
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_FALSE(runner.isOk());
  EXPECT_EQ(runner.status().code(), StatusCode::kUnavailable);
#ifdef KILN_HAVE_CUDA_BACKEND
  EXPECT_EQ(runner.status().message(),
            "NCCL unavailable: rank 0 is on device 'cpu', not a CUDA GPU");
#else
  EXPECT_EQ(runner.status().message(), "NCCL unavailable: this kiln was built without the CUDA "
                                       "backend (-DKILN_ENABLE_CUDA=ON)");
#endif
}

TEST_F(MultiRankRunnerTest, GpuOrdinalsOnCpuAreRejected) {
  MultiRankOptions options;
  options.executor.numKvBlocks = 4;
  options.devices = {0, 1};
  auto runner = MultiRankRunner::create(*artifact_, options);
  ASSERT_FALSE(runner.isOk());
  EXPECT_EQ(runner.status().message(), "MultiRankOptions.devices lists GPUs but the device is cpu");
}

} // namespace
} // namespace kiln::rt
