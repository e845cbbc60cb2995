#include "runtime/exec/multi_rank_runner.h"

#include "runtime/exec/step_inputs.h"

#include <omp.h>

#include <algorithm>

namespace kiln::rt {

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
  runner->communicator_ = options.communicator
                              ? options.communicator
                              : std::make_shared<CpuCommunicator>(tp, options.collectiveTimeout);
  runner->threadsPerRank_ =
      options.threadsPerRank > 0 ? options.threadsPerRank : std::max(1, omp_get_num_procs() / tp);
  ExecutorOptions executorOptions = options.executor;
  executorOptions.communicator = runner->communicator_.get();
  for (int r = 0; r < tp; ++r) {
    Result<std::unique_ptr<Device>> device =
        options.deviceFactory ? options.deviceFactory(r) : createDevice(options.device);
    if (!device.isOk())
      return device.status().withContext("rank " + std::to_string(r));
    runner->devices_.push_back(std::move(device).value());
    executorOptions.rank = r;
    auto executor = Executor::create(artifact, *runner->devices_.back(), executorOptions);
    if (!executor.isOk())
      return executor.status().withContext("rank " + std::to_string(r));
    if (r == 0) // the shared block tables must fit every rank's cache
      executorOptions.numKvBlocks = (*executor)->limits().numKvBlocks;
    runner->executors_.push_back(std::move(executor).value());
  }
  runner->limits_ = runner->executors_[0]->limits();
  runner->results_.resize(tp, Result<StepOutput>(StepOutput{}));
  for (int r = 0; r < tp; ++r)
    runner->threads_.emplace_back(&MultiRankRunner::rankLoop, runner.get(), r);
  return runner;
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
