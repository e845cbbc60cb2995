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
//
// Ranks run on cpu devices or CUDA GPUs, several ranks possibly sharing one GPU (--devices 0,0).
// The collectives go through the CpuCommunicator (cpu ranks), NCCL (one GPU per rank and libnccl
// loads) or the StagedCommunicator (any other placement): chooseCollectives, logged in one line.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/communicator.h"
#include "runtime/exec/executor.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::rt {

// How the ranks' collectives run (MultiRankOptions.collectives).
enum class CollectiveBackend : uint8_t {
  kAuto,   // chooseCollectives
  kCpu,    // CpuCommunicator: cpu ranks sharing host memory
  kStaged, // StagedCommunicator: any devices, through host copies (ranks sharing a GPU)
  kNccl,   // NcclCommunicator: one GPU per rank
};
const char *collectiveBackendName(CollectiveBackend backend);

struct CollectiveChoice {
  CollectiveBackend backend = CollectiveBackend::kCpu;
  std::string reason; // for the log line: "one GPU per rank", "ranks 0 and 1 share GPU 0", ...
};
// What kAuto picks for ranks on devices of `kinds` (`ordinals[r]`: rank r's CUDA GPU): cpu for
// all-cpu ranks, NCCL when every rank has a GPU of its own and `nccl` (probeNccl's answer) is
// ok, the staged communicator otherwise.
CollectiveChoice chooseCollectives(const std::vector<DeviceKind> &kinds,
                                   const std::vector<int> &ordinals, const Status &nccl);

// Where each rank of an artifact runs, from --device and --devices.
struct RankPlacementRequest {
  std::string artifactDir; // for messages
  int tp = 1;
  std::string device = "cpu"; // "cpu", "cuda" or "cuda:N"
  std::vector<int> devices;   // --devices: rank r on GPU devices[r]; empty: GPU r (or N)
  CudaDeviceCount visible;    // what countCudaDevices() says; read only for CUDA
};
struct RankPlacement {
  DeviceKind kind = DeviceKind::kCpu;
  std::vector<int> ordinals; // per rank on CUDA; empty on cpu
  // "cpu" or "cuda:N": what createDevice takes for `rank`.
  std::string deviceName(int rank) const;
  // Two or more ranks on one GPU (they need the staged communicator).
  bool sharesGpu() const;
};
// Errors name the flag and the numbers: --devices with --device cpu; a list whose length is not
// the artifact's tp; no GPU visible; an ordinal that is not visible; a tp above the visible GPUs
// with the default mapping (repeated ordinals share a GPU, which is allowed).
Result<RankPlacement> placeRanks(const RankPlacementRequest &request);

struct MultiRankOptions {
  std::string device = "cpu"; // "cpu" or "cuda": every rank gets its own device of this kind
  // On cuda, rank r runs on GPU devices[r] (repeats allowed: those ranks share the GPU); empty:
  // GPU r. Must be empty on cpu. placeRanks() validates a user's list.
  std::vector<int> devices;
  // KV cache sizing per rank (rank and communicator are set per rank). Rank 0's block count is
  // imposed on the others so the shared block tables fit every rank. With memoryUtilization on
  // a GPU that k ranks share, rank 0 sizes its cache for 1/k of what the fraction leaves.
  ExecutorOptions executor;
  // How long a rank waits at a collective for its partners, and how long a failed step waits for
  // the ranks still running before it returns anyway.
  std::chrono::milliseconds collectiveTimeout{60000};
  // Rank r's device; default createDevice(device or "cuda:N"). Tests inject failing devices here.
  std::function<Result<std::unique_ptr<Device>>(int rank)> deviceFactory;
  // Default: built for `collectives` after the devices exist.
  std::shared_ptr<Communicator> communicator;
  CollectiveBackend collectives = CollectiveBackend::kAuto;
  std::string ncclLibrary = "libnccl.so.2";
  // Receives one line saying which collectives run and why (null: nothing is logged).
  std::function<void(const std::string &)> log;
  // Threads per rank inside the cpu kernels (each rank thread's own worker pool,
  // kernels/cpu/worker_pool.h, sized by omp_set_num_threads on that thread); 0: the machine's cores / tp (at least 1), so
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
  // Which communicator runs the collectives (the injected one: kAuto).
  CollectiveBackend collectives() const { return collectives_; }

private:
  MultiRankRunner() = default;
  Status createDevices(int tp, const MultiRankOptions &options);
  Status createCommunicator(const Artifact &artifact, const MultiRankOptions &options);
  Result<ExecutorOptions> rankZeroOptions(const MultiRankOptions &options) const;
  Status createExecutors(const Artifact &artifact, const MultiRankOptions &options);
  void rankLoop(int rank);
  Status waitForIdle();
  Status stepFailure();

  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Executor>> executors_;
  std::vector<int> ordinals_; // rank r's GPU; -1 on cpu
  std::shared_ptr<Communicator> communicator_;
  CollectiveBackend collectives_ = CollectiveBackend::kAuto;
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
