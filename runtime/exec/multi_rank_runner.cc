#include "runtime/exec/multi_rank_runner.h"

#include "runtime/exec/nccl_communicator.h"
#include "runtime/exec/staged_communicator.h"
#include "runtime/exec/step_inputs.h"

#include <omp.h>

#include <algorithm>

namespace kiln::rt {

namespace {

std::string joinInts(const std::vector<int> &values, const char *separator) {
  std::string joined;
  for (int v : values)
    joined += (joined.empty() ? "" : separator) + std::to_string(v);
  return joined;
}

std::string plural(size_t n, const std::string &word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// "only 1 CUDA device is visible (0)", "only 2 CUDA devices are visible (0, 1)"
std::string onlyVisible(int count) {
  std::string ordinals = count == 1 ? "0" : count == 2 ? "0, 1" : "0-" + std::to_string(count - 1);
  return "only " + plural(count, "CUDA device") + (count == 1 ? " is" : " are") + " visible (" +
         ordinals + ")";
}

// The default mapping's repeated ordinals, as a hint: tp 4 on 2 GPUs -> "0,0,1,1".
std::string sharedMapping(int tp, int count) {
  std::vector<int> ordinals;
  for (int r = 0; r < tp; ++r)
    ordinals.push_back(r * count / tp);
  return joinInts(ordinals, ",");
}

Result<std::vector<int>> placeOnCuda(const RankPlacementRequest &request, const DeviceName &name) {
  const std::string artifact = "artifact '" + request.artifactDir + "'";
  const std::string flag = request.devices.empty() ? "--device " + request.device
                                                   : "--devices " + joinInts(request.devices, ",");
  if (request.visible.count <= 0)
    return unavailable(flag + ": no CUDA device is visible (" + request.visible.reason + ")");
  const int count = request.visible.count;
  if (!request.devices.empty()) {
    for (int ordinal : request.devices)
      if (ordinal < 0 || ordinal >= count)
        return invalidArgument(flag + ": " + onlyVisible(count));
    return request.devices;
  }
  if (name.explicitOrdinal) {
    if (request.tp > 1)
      return invalidArgument(flag + " names one GPU but " + artifact + " has tp " +
                             std::to_string(request.tp) +
                             ": place every rank with --devices (e.g. --devices " +
                             sharedMapping(request.tp, std::max(count, request.tp)) + ")");
    if (name.ordinal >= count)
      return invalidArgument(flag + ": " + onlyVisible(count));
    return std::vector<int>{name.ordinal};
  }
  if (request.tp > count)
    return invalidArgument(artifact + " has tp " + std::to_string(request.tp) + " but " +
                           onlyVisible(count) +
                           "; pass --devices with repeated ordinals to share a GPU (e.g. "
                           "--devices " +
                           sharedMapping(request.tp, count) + ")");
  std::vector<int> ordinals(request.tp);
  for (int r = 0; r < request.tp; ++r)
    ordinals[r] = r;
  return ordinals;
}

} // namespace

const char *collectiveBackendName(CollectiveBackend backend) {
  switch (backend) {
  case CollectiveBackend::kCpu:
    return "cpu (shared host memory)";
  case CollectiveBackend::kStaged:
    return "staged through host memory";
  case CollectiveBackend::kNccl:
    return "NCCL";
  default:
    return "auto";
  }
}

CollectiveChoice chooseCollectives(const std::vector<DeviceKind> &kinds,
                                   const std::vector<int> &ordinals, const Status &nccl) {
  const auto cuda = std::count(kinds.begin(), kinds.end(), DeviceKind::kCuda);
  if (cuda == 0)
    return {CollectiveBackend::kCpu, "every rank is on the cpu"};
  if (cuda != static_cast<long>(kinds.size()))
    return {CollectiveBackend::kStaged, "the ranks are on cpu and CUDA devices"};
  for (size_t r = 0; r < ordinals.size(); ++r)
    for (size_t s = 0; s < r; ++s)
      if (ordinals[s] == ordinals[r])
        return {CollectiveBackend::kStaged, "ranks " + std::to_string(s) + " and " +
                                                std::to_string(r) + " share GPU " +
                                                std::to_string(ordinals[r])};
  if (!nccl.isOk())
    return {CollectiveBackend::kStaged, nccl.message()};
  return {CollectiveBackend::kNccl, "one GPU per rank"};
}

std::string RankPlacement::deviceName(int rank) const {
  if (kind == DeviceKind::kCpu)
    return "cpu";
  return "cuda:" + std::to_string(ordinals[rank]);
}

bool RankPlacement::sharesGpu() const {
  for (size_t r = 0; r < ordinals.size(); ++r)
    if (std::count(ordinals.begin(), ordinals.end(), ordinals[r]) > 1)
      return true;
  return false;
}

Result<RankPlacement> placeRanks(const RankPlacementRequest &request) {
  KILN_ASSIGN_OR_RETURN(DeviceName name, parseDeviceName(request.device));
  RankPlacement placement;
  placement.kind = name.kind;
  if (!request.devices.empty()) {
    if (name.kind == DeviceKind::kCpu)
      return invalidArgument("--devices places ranks on CUDA GPUs; it cannot be combined with "
                             "--device cpu (cpu ranks share the host)");
    if (name.explicitOrdinal)
      return invalidArgument("--device " + request.device +
                             " and --devices both place ranks: give --device cuda with --devices");
    if (static_cast<int>(request.devices.size()) != request.tp)
      return invalidArgument("artifact '" + request.artifactDir + "' has tp " +
                             std::to_string(request.tp) + "; --devices lists " +
                             plural(request.devices.size(), "device"));
  }
  if (name.kind == DeviceKind::kCuda) {
    KILN_ASSIGN_OR_RETURN(placement.ordinals, placeOnCuda(request, name));
  }
  return placement;
}

Result<std::unique_ptr<MultiRankRunner>> MultiRankRunner::create(const Artifact &artifact,
                                                                 const MultiRankOptions &options) {
  int tp = static_cast<int>(artifact.plan().tp());
  for (int r = 0; r < tp; ++r)
    if (!artifact.hasWeights(r))
      return invalidArgument("artifact '" + artifact.directory() + "': rank " + std::to_string(r) +
                             "'s weights were not loaded (load with LoadOptions::rank = -1)");
  if (options.collectiveTimeout.count() <= 0)
    return invalidArgument("collective timeout must be positive, got " +
                           std::to_string(options.collectiveTimeout.count()) + " ms");
  std::unique_ptr<MultiRankRunner> runner(new MultiRankRunner());
  runner->timeout_ = options.collectiveTimeout;
  runner->threadsPerRank_ =
      options.threadsPerRank > 0 ? options.threadsPerRank : std::max(1, omp_get_num_procs() / tp);
  KILN_RETURN_IF_ERROR(runner->createDevices(tp, options));
  KILN_RETURN_IF_ERROR(runner->createCommunicator(artifact, options));
  KILN_RETURN_IF_ERROR(runner->createExecutors(artifact, options));
  runner->limits_ = runner->executors_[0]->limits();
  runner->results_.resize(tp, Result<StepOutput>(StepOutput{}));
  for (int r = 0; r < tp; ++r)
    runner->threads_.emplace_back(&MultiRankRunner::rankLoop, runner.get(), r);
  return runner;
}

Status MultiRankRunner::createDevices(int tp, const MultiRankOptions &options) {
  KILN_ASSIGN_OR_RETURN(DeviceName kind, parseDeviceName(options.device));
  if (kind.kind == DeviceKind::kCpu && !options.devices.empty())
    return invalidArgument("MultiRankOptions.devices lists GPUs but the device is cpu");
  if (!options.devices.empty() && static_cast<int>(options.devices.size()) != tp)
    return invalidArgument("MultiRankOptions.devices lists " +
                           std::to_string(options.devices.size()) + " GPUs for tp " +
                           std::to_string(tp));
  for (int r = 0; r < tp; ++r) {
    int ordinal = -1;
    if (kind.kind == DeviceKind::kCuda)
      ordinal = options.devices.empty() ? kind.ordinal + r : options.devices[r];
    Result<std::unique_ptr<Device>> device =
        options.deviceFactory
            ? options.deviceFactory(r)
            : createDevice(ordinal < 0 ? "cpu" : "cuda:" + std::to_string(ordinal));
    if (!device.isOk())
      return device.status().withContext("rank " + std::to_string(r));
    ordinals_.push_back((*device)->kind() != DeviceKind::kCuda ? -1 : ordinal >= 0 ? ordinal : r);
    devices_.push_back(std::move(device).value());
  }
  return okStatus();
}

Status MultiRankRunner::createCommunicator(const Artifact &artifact,
                                           const MultiRankOptions &options) {
  const int tp = static_cast<int>(devices_.size());
  if (options.communicator) {
    communicator_ = options.communicator;
    return okStatus();
  }
  std::vector<DeviceKind> kinds;
  std::vector<Device *> devices;
  for (const auto &device : devices_) {
    kinds.push_back(device->kind());
    devices.push_back(device.get());
  }
  CollectiveChoice choice{options.collectives, "as asked"};
  if (options.collectives == CollectiveBackend::kAuto) {
    bool anyCuda = std::find(kinds.begin(), kinds.end(), DeviceKind::kCuda) != kinds.end();
    Status nccl = anyCuda ? probeNccl(options.ncclLibrary).status()
                          : unavailable("NCCL unavailable: no CUDA rank");
    choice = chooseCollectives(kinds, ordinals_, nccl);
  }
  const CollectiveSizes sizes = collectiveSizes(artifact.plan());
  std::string detail;
  if (choice.backend == CollectiveBackend::kNccl) {
    NcclOptions nccl;
    nccl.library = options.ncclLibrary;
    nccl.timeout = options.collectiveTimeout;
    Result<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::create(devices, ordinals_, sizes, nccl);
    if (comm.isOk()) {
      detail = " (" + (*comm)->description() + ")";
      communicator_ = std::move(comm).value();
    } else if (options.collectives == CollectiveBackend::kNccl) {
      return comm.status();
    } else { // NCCL loaded but could not connect the GPUs: the staged path still works
      choice = {CollectiveBackend::kStaged, comm.status().message()};
    }
  }
  if (choice.backend == CollectiveBackend::kStaged) {
    KILN_ASSIGN_OR_RETURN(communicator_,
                          StagedCommunicator::create(devices, sizes, options.collectiveTimeout));
  } else if (choice.backend == CollectiveBackend::kCpu) {
    communicator_ = std::make_shared<CpuCommunicator>(tp, options.collectiveTimeout);
  }
  collectives_ = choice.backend;
  if (options.log) {
    std::string on;
    for (const auto &device : devices_)
      on += (on.empty() ? "" : ", ") + device->name();
    options.log("tensor parallelism: " + std::to_string(tp) + " ranks on " + on +
                "; collectives: " + collectiveBackendName(choice.backend) + detail + ", " +
                choice.reason);
  }
  return okStatus();
}

// Ranks sharing a GPU: rank 0 must leave room for the others' weights and caches, so its
// fraction keeps what the device already used and 1/k of the rest up to the asked fraction.
Result<ExecutorOptions> MultiRankRunner::rankZeroOptions(const MultiRankOptions &options) const {
  ExecutorOptions executorOptions = options.executor;
  executorOptions.communicator = communicator_.get();
  executorOptions.rank = 0;
  if (executorOptions.memoryUtilization <= 0 || ordinals_[0] < 0)
    return executorOptions;
  int sharing = 0;
  for (int ordinal : ordinals_)
    sharing = std::max<int>(sharing, std::count(ordinals_.begin(), ordinals_.end(), ordinal));
  if (sharing <= 1)
    return executorOptions;
  Result<DeviceMemoryInfo> info = devices_[0]->memoryInfo();
  if (!info.isOk())
    return info.status().withContext("rank 0: sizing the KV cache of ranks sharing a GPU");
  if (info->totalBytes == 0)
    return executorOptions;
  const double total = static_cast<double>(info->totalBytes);
  const double used = total - static_cast<double>(info->freeBytes);
  const double budget = std::max(0.0, executorOptions.memoryUtilization * total - used);
  executorOptions.memoryUtilization = (used + budget / sharing) / total;
  return executorOptions;
}

Status MultiRankRunner::createExecutors(const Artifact &artifact, const MultiRankOptions &options) {
  KILN_ASSIGN_OR_RETURN(ExecutorOptions executorOptions, rankZeroOptions(options));
  for (int r = 0; r < static_cast<int>(devices_.size()); ++r) {
    executorOptions.rank = r;
    auto executor = Executor::create(artifact, *devices_[r], executorOptions);
    if (!executor.isOk())
      return executor.status().withContext("rank " + std::to_string(r));
    if (r == 0) { // the shared block tables must fit every rank's cache
      executorOptions.numKvBlocks = (*executor)->limits().numKvBlocks;
      executorOptions.memoryUtilization = 0;
    }
    executors_.push_back(std::move(executor).value());
  }
  return okStatus();
}

MultiRankRunner::~MultiRankRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  // A rank stuck inside a device op is waited for: its executor and device cannot be freed under
  // it.
  for (std::thread &thread : threads_)
    thread.join();
}

void MultiRankRunner::rankLoop(int rank) {
  omp_set_num_threads(threadsPerRank_);
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || step_ != seen; });
      if (stop_)
        return;
      seen = step_;
    }
    Result<StepOutput> result = executors_[rank]->execute(batch_);
    if (!result.isOk())
      communicator_->abort(rank, result.status().withContext("rank " + std::to_string(rank)));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      results_[rank] = std::move(result);
      --running_;
    }
    done_.notify_all();
  }
}

// Before a step: every rank must have left the previous one.
Status MultiRankRunner::waitForIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (done_.wait_for(lock, timeout_, [&] { return running_ == 0; }))
    return okStatus();
  return unavailable("tensor parallelism: " + std::to_string(running_) +
                     " rank(s) are still inside an earlier failed step after " +
                     std::to_string(timeout_.count()) +
                     " ms; the model cannot step until they "
                     "return");
}

// The step's error: the communicator's first failure names the rank that failed or stalled;
// a partner's "woken by the abort" error would only repeat it.
Status MultiRankRunner::stepFailure() {
  Status first = communicator_->failure();
  if (!first.isOk())
    return first;
  for (const Result<StepOutput> &result : results_)
    if (!result.isOk())
      return result.status();
  return okStatus();
}

Result<StepOutput> MultiRankRunner::execute(const StepBatch &batch) {
  // Checked once here so a bad batch fails alone, without waking the ranks.
  KILN_RETURN_IF_ERROR(validateStep(batch, limits_));
  KILN_RETURN_IF_ERROR(waitForIdle());
  communicator_->reset();
  std::unique_lock<std::mutex> lock(mutex_);
  batch_ = batch;
  running_ = static_cast<int>(executors_.size());
  std::fill(results_.begin(), results_.end(), Result<StepOutput>(StepOutput{}));
  ++step_;
  start_.notify_all();
  // Every rank finishes, or one fails (a failing or timed-out rank finishes and notifies); then
  // the others get one more timeout to notice the abort before the step returns without them.
  done_.wait(lock, [&] { return running_ == 0 || !communicator_->failure().isOk(); });
  if (running_ != 0)
    done_.wait_for(lock, timeout_, [&] { return running_ == 0; });
  Status failure = stepFailure();
  if (!failure.isOk())
    return running_ == 0 ? failure
                         : failure.withContext(std::to_string(running_) +
                                               " rank(s) did not finish the failed step");
  return std::move(results_[0]);
}

} // namespace kiln::rt
