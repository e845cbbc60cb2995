// The pool behind parallelRun (worker_pool.h). One job at a time: the caller publishes it by
// bumping `generation_`, every worker (taking part or not) counts itself off `pending_` when done,
// and the caller returns when `pending_` reaches zero, so no worker can still be reading a job when
// the next one is written. Waits spin for KILN_CPU_SPIN_US, then sleep on a futex
// (std::atomic::wait); a side wakes the other only when it is known to be asleep (sleepers_,
// callerAsleep_: sequentially consistent, so one side always sees the other). Workers spin only
// while jobs come close together: when this job was published more than the spin time after the
// last one ended (a small model, whose kernels mostly run inline, or an idle server), they sleep
// at once and leave the core to the threads that have work (the HTTP threads of `kiln serve`).
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <thread>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

int spinMicros() {
  static const int micros = [] {
    const char *value = std::getenv("KILN_CPU_SPIN_US");
    if (value == nullptr || *value == '\0')
      return kDefaultSpinMicros;
    char *end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    return *end == '\0' && parsed >= 0 && parsed <= 1000000 ? static_cast<int>(parsed)
                                                            : kDefaultSpinMicros;
  }();
  return micros;
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Spins until done() or the spin time is over; true when done.
template <class Done> bool spinUntil(Done done) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(spinMicros());
  for (uint32_t i = 1;; ++i) {
    if (done())
      return true;
    relax();
    if (i % 64 == 0) {
      if (Clock::now() >= deadline)
        return done();
      // Another thread runnable on this core (an HTTP thread of `kiln serve`) runs now rather
      // than after the spin; with none, this returns at once.
      sched_yield();
    }
  }
}

class WorkerPool {
public:
  explicit WorkerPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back(&WorkerPool::workerLoop, this, i);
  }
  ~WorkerPool() {
    stop_.store(true, std::memory_order_relaxed);
    publish();
    for (std::thread &worker : workers_)
      worker.join();
  }
  WorkerPool(const WorkerPool &) = delete;
  WorkerPool &operator=(const WorkerPool &) = delete;

  int threads() const { return threads_; }

  void run(ParallelBody body, void *context) {
    jobsClose_.store(nowNanos() - lastJobEnd_ <= spinMicros() * int64_t(1000),
                     std::memory_order_relaxed);
    body_ = body;
    context_ = context;
    pending_.store(static_cast<uint32_t>(threads_ - 1), std::memory_order_relaxed);
    publish();
    body(context, 0, threads_);
    if (!spinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      callerAsleep_.store(true);
      for (uint32_t left; (left = pending_.load()) != 0;)
        pending_.wait(left);
      callerAsleep_.store(false, std::memory_order_relaxed);
    }
    lastJobEnd_ = nowNanos();
  }

private:
  void publish() {
    generation_.fetch_add(1);
    if (sleepers_.load() > 0)
      generation_.notify_all();
  }

  void workerLoop(int index);

  const int threads_;
  std::vector<std::thread> workers_;
  ParallelBody body_ = nullptr;
  void *context_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> callerAsleep_{false};
  int64_t lastJobEnd_ = 0;             // when the last job ended (caller only)
  std::atomic<bool> jobsClose_{false}; // this job came within the spin time of the last one
};

// Set on pool workers, and on a caller while its pool runs a job: parallelRun inside a body runs
// inline.
thread_local bool tInsideJob = false;

void WorkerPool::workerLoop(int index) {
  tInsideJob = true;
  uint32_t seen = 0;
  while (true) {
    const bool spin = jobsClose_.load(std::memory_order_relaxed);
    if (!spin || !spinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      sleepers_.fetch_add(1);
      while (generation_.load() == seen)
        generation_.wait(seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed))
      return;
    body_(context_, index, threads_);
    if (pending_.fetch_sub(1) == 1 && callerAsleep_.load())
      pending_.notify_one();
  }
}

thread_local std::unique_ptr<WorkerPool> tPool;

// A forked child has only the forking thread: its pool's workers did not come along, so the child
// forgets the pool (leaking it: its threads cannot be joined) and makes a new one when needed.
void forgetPoolInChild() {
  (void)tPool.release();
}

// The caller's pool with `wanted` threads (made or remade when the count changed).
WorkerPool &poolOfCaller(int wanted) {
  static const bool registered = pthread_atfork(nullptr, nullptr, forgetPoolInChild) == 0;
  (void)registered;
  if (!tPool || tPool->threads() != wanted) {
    tPool.reset();
    tPool = std::make_unique<WorkerPool>(wanted);
  }
  return *tPool;
}

} // namespace

int cpuThreads() {
  return std::max(1, omp_get_max_threads());
}

void parallelRunRaw(bool parallel, ParallelBody body, void *context) {
  const int threads = parallel && !tInsideJob ? cpuThreads() : 1;
  if (threads == 1) {
    body(context, 0, 1);
    return;
  }
  WorkerPool &pool = poolOfCaller(threads);
  tInsideJob = true;
  pool.run(body, context);
  tInsideJob = false;
}

IndexRange staticRange(int64_t count, int worker, int workers) {
  const int64_t base = count / workers;
  const int64_t extra = count % workers;
  const int64_t begin = worker * base + std::min<int64_t>(worker, extra);
  return {begin, begin + base + (worker < extra ? 1 : 0)};
}

} // namespace kiln::kernels::cpu
