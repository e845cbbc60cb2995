// The CPU kernels' worker pool (kernels/cpu/worker_pool.h): every worker runs each job once, the
// static and dynamic splits cover every index exactly once, nested calls run inline, each calling
// thread has its own pool at its own thread count, a forked child makes its own, and jobs separated
// by sleeps (workers asleep on the futex) or by nothing (workers spinning) both complete.
#include "kernels/cpu/worker_pool.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

// Restores the calling thread's thread count when a test ends.
class ThreadCount {
public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }

private:
  int saved_;
};

// Runs one job and returns the (worker, workers) pairs the body saw, sorted.
std::vector<std::pair<int, int>> workersOfOneJob(bool parallel) {
  std::mutex mutex;
  std::vector<std::pair<int, int>> seen;
  parallelRun(parallel, [&](int worker, int workers) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.emplace_back(worker, workers);
  });
  std::sort(seen.begin(), seen.end());
  return seen;
}

TEST(WorkerPool, EveryWorkerRunsTheBodyOnce) {
  ThreadCount count(4);
  EXPECT_EQ(cpuThreads(), 4);
  const std::vector<std::pair<int, int>> all = {{0, 4}, {1, 4}, {2, 4}, {3, 4}};
  EXPECT_EQ(workersOfOneJob(true), all);
  const std::vector<std::pair<int, int>> inlineOnly = {{0, 1}};
  EXPECT_EQ(workersOfOneJob(false), inlineOnly);
}

TEST(WorkerPool, WorkerZeroIsTheCaller) {
  ThreadCount count(3);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> callerRuns{0}, zeroElsewhere{0};
  parallelRun(true, [&](int worker, int) {
    if (std::this_thread::get_id() == caller)
      callerRuns += worker == 0 ? 1 : 100;
    else if (worker == 0)
      ++zeroElsewhere;
  });
  EXPECT_EQ(callerRuns.load(), 1);
  EXPECT_EQ(zeroElsewhere.load(), 0);
}

TEST(WorkerPool, StaticRangesCoverEveryIndexOnceInOrder) {
  for (int workers : {1, 2, 3, 4, 7})
    for (int64_t count : {0, 1, 2, 3, 5, 16, 17, 1000}) {
      int64_t next = 0;
      int64_t smallest = count, largest = 0;
      for (int w = 0; w < workers; ++w) {
        const IndexRange range = staticRange(count, w, workers);
        EXPECT_EQ(range.begin, next) << count << " over " << workers << ", worker " << w;
        EXPECT_GE(range.end, range.begin);
        next = range.end;
        smallest = std::min(smallest, range.end - range.begin);
        largest = std::max(largest, range.end - range.begin);
      }
      EXPECT_EQ(next, count) << count << " over " << workers;
      EXPECT_LE(largest - smallest, 1) << count << " over " << workers;
    }
}

TEST(WorkerPool, ParallelForVisitsEveryIndexOnce) {
  ThreadCount count(4);
  constexpr int64_t kCount = 10007;
  std::vector<std::atomic<int>> visits(kCount);
  parallelFor(true, kCount, [&](int64_t i) { visits[i].fetch_add(1); });
  for (int64_t i = 0; i < kCount; ++i)
    ASSERT_EQ(visits[i].load(), 1) << "index " << i;
}

TEST(WorkerPool, DynamicRangesHandOutEveryIndexOnce) {
  ThreadCount count(4);
  constexpr int64_t kCount = 1001;
  std::vector<std::atomic<int>> visits(kCount);
  DynamicRanges chunks(kCount, 4);
  parallelRun(true, [&](int, int) {
    for (IndexRange chunk; chunks.next(chunk);) {
      EXPECT_LE(chunk.end - chunk.begin, 4);
      for (int64_t i = chunk.begin; i < chunk.end; ++i)
        visits[i].fetch_add(1);
    }
  });
  for (int64_t i = 0; i < kCount; ++i)
    ASSERT_EQ(visits[i].load(), 1) << "index " << i;
}

TEST(WorkerPool, NestedCallsRunInline) {
  ThreadCount count(3);
  std::atomic<int> innerRuns{0}, innerWidest{0};
  parallelRun(true, [&](int, int) {
    parallelRun(true, [&](int worker, int workers) {
      ++innerRuns;
      int widest = innerWidest.load();
      while (workers > widest && !innerWidest.compare_exchange_weak(widest, workers)) {
      }
      EXPECT_EQ(worker, 0);
    });
  });
  EXPECT_EQ(innerRuns.load(), 3); // once per outer worker
  EXPECT_EQ(innerWidest.load(), 1);
}

TEST(WorkerPool, FollowsAChangedThreadCount) {
  for (int threads : {3, 2, 4, 1}) {
    ThreadCount count(threads);
    EXPECT_EQ(static_cast<int>(workersOfOneJob(true).size()), threads);
  }
}

// Jobs back to back (workers still spinning) and jobs after a sleep far longer than the spin
// (workers asleep on the futex) both run every worker exactly once.
TEST(WorkerPool, JobsCompleteWhetherWorkersSpinOrSleep) {
  ThreadCount count(3);
  int64_t total = 0;
  for (int job = 0; job < 400; ++job) {
    if (job % 50 == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int64_t> sum{0};
    parallelFor(true, 100, [&](int64_t i) { sum += i; });
    ASSERT_EQ(sum.load(), 4950) << "job " << job;
    total += sum.load();
  }
  EXPECT_EQ(total, 400 * 4950);
}

// Two threads calling kernels at once (the ranks of runtime/exec/multi_rank_runner.cc) each get
// their own pool at their own count, and neither sees the other's jobs.
TEST(WorkerPool, EachCallingThreadHasItsOwnPool) {
  std::atomic<bool> failed{false};
  auto caller = [&](int threads) {
    omp_set_num_threads(threads);
    for (int job = 0; job < 300; ++job) {
      const std::vector<std::pair<int, int>> seen = workersOfOneJob(true);
      if (static_cast<int>(seen.size()) != threads)
        failed = true;
      for (int w = 0; w < static_cast<int>(seen.size()); ++w)
        if (seen[w] != std::make_pair(w, threads))
          failed = true;
    }
  };
  std::thread a(caller, 2), b(caller, 3);
  a.join();
  b.join();
  EXPECT_FALSE(failed.load());
}

// A forked child (only the forking thread survives) runs jobs on a fresh pool instead of waiting
// for workers that did not come along.
TEST(WorkerPool, AForkedChildGetsAFreshPool) {
  ThreadCount count(3);
  ASSERT_EQ(workersOfOneJob(true).size(), 3u); // the parent's pool exists before the fork
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(60); // a child stuck waiting for absent workers dies instead of hanging the test
    std::atomic<int64_t> sum{0};
    parallelFor(true, 100, [&](int64_t i) { sum += i; });
    _exit(sum.load() == 4950 && workersOfOneJob(true).size() == 3 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

} // namespace
} // namespace kiln::kernels::cpu
