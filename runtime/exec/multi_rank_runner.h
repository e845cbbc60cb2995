// A tensor-parallel artifact's ranks run as one ModelRunner: one Executor per rank, each on its
// own Device, each on its own thread, stepping in lockstep under the single engine. Block tables
// are shared (one scheduler): every rank's KV cache has the same number of blocks and holds that
// rank's KV heads. execute() hands the batch to every rank thread, waits for all of them and
// returns rank 0's logits (gathered to full vocab rows by the plan's AllGather).
//
// A rank that fails aborts the communicator so its partners stop waiting; a rank that stalls makes
// its partners' collectives time out. Either way the step fails with a message naming the rank,
// and the next step runs normally. A rank still stuck after the grace period (its step failed
// meanwhile) makes later steps fail, saying so, until it returns: never a hang of the engine.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/communicator.h"
#include "runtime/exec/executor.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::rt {

struct MultiRankOptions {
  std::string device = "cpu"; // every rank gets its own device of this kind
  // KV cache sizing per rank (rank and communicator are set per rank). Rank 0's block count is
  // imposed on the others so the shared block tables fit every rank.
  ExecutorOptions executor;
  // How long a rank waits at a collective for its partners, and how long a failed step waits for
  // the ranks still running before it returns anyway.
  std::chrono::milliseconds collectiveTimeout{60000};
  // Rank r's device; default createDevice(device). Tests inject failing devices here.
  std::function<Result<std::unique_ptr<Device>>(int rank)> deviceFactory;
  // Default: a CpuCommunicator of the artifact's tp with collectiveTimeout.
  std::shared_ptr<Communicator> communicator;
  // OpenMP threads per rank inside the cpu kernels; 0: the machine's cores / tp (at least 1), so
  // tp ranks do not oversubscribe the cores.
  int threadsPerRank = 0;
};

class MultiRankRunner final : public ModelRunner {
public:
  // `artifact` must outlive the runner and have every rank's weights loaded.
  static Result<std::unique_ptr<MultiRankRunner>> create(const Artifact &artifact,
                                                         const MultiRankOptions &options = {});
  ~MultiRankRunner() override;
  MultiRankRunner(const MultiRankRunner &) = delete;
  MultiRankRunner &operator=(const MultiRankRunner &) = delete;

  const RunnerLimits &limits() const override { return limits_; }
  Result<StepOutput> execute(const StepBatch &batch) override;

  int numRanks() const { return static_cast<int>(executors_.size()); }

private:
  MultiRankRunner() = default;
  void rankLoop(int rank);
  Status waitForIdle();
  Status stepFailure();

  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Executor>> executors_;
  std::shared_ptr<Communicator> communicator_;
  RunnerLimits limits_;
  std::chrono::milliseconds timeout_{0};
  int threadsPerRank_ = 1;

  std::mutex mutex_;
  std::condition_variable start_, done_;
  StepBatch batch_;   // the current step's batch, read by every rank thread
  uint64_t step_ = 0; // incremented to start a step
  int running_ = 0;   // ranks still inside the current step
  bool stop_ = false;
  std::vector<Result<StepOutput>> results_;
  std::vector<std::thread> threads_;
};

} // namespace kiln::rt
