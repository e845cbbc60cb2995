// The CPU kernels' threads: one persistent pool per calling thread instead of an OpenMP parallel
// region per kernel.
//
// A decode step runs ~150 kernels. With OpenMP each opened a parallel region, and under
// OMP_WAIT_POLICY=passive (what `kiln serve` needed so spinning workers do not starve its HTTP
// threads) every region paid a futex wake-up and a sleep per worker: a third of a decode step. The
// pool's workers instead spin for a short, bounded time after each kernel (KILN_CPU_SPIN_US,
// default kDefaultSpinMicros) and only then sleep, so the kernels of one step hand work over in
// about a microsecond; and they spin only while kernels come that close together (a small model
// whose kernels mostly run inline, or an idle server, gets sleeping workers and the cores go to
// the threads that have work).
//
// Each thread that calls kernels gets its own pool (thread_local): the engine thread, or each rank
// thread of runtime/exec/multi_rank_runner.cc, which therefore never share workers. A pool has
// omp_get_max_threads() threads as seen by its calling thread when it is made (OMP_NUM_THREADS,
// or omp_set_num_threads on that thread: the settings users and tests already give), the caller
// counted; it is remade when that number changes.
//
// How work is split never changes a result: every kernel computes each output element on one
// thread in a fixed order, so results are bit-identical at any thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace kiln::kernels::cpu {

// Workers spin this long for the next kernel before they sleep.
constexpr int kDefaultSpinMicros = 50;

// Threads the calling thread's kernels run on (the caller included), at least 1.
int cpuThreads();

// Runs body(worker, workers) once on each of `workers` threads, worker 0 being the caller, and
// returns when all have returned. workers = cpuThreads() when `parallel`, else 1 (the body runs
// inline). Bodies must not throw; a body must not call parallelRun itself (nested calls run
// inline, with workers = 1).
using ParallelBody = void (*)(void *context, int worker, int workers);
void parallelRunRaw(bool parallel, ParallelBody body, void *context);

template <class F> void parallelRun(bool parallel, F &&body) {
  parallelRunRaw(
      parallel,
      [](void *context, int worker, int workers) {
        (*static_cast<std::remove_reference_t<F> *>(context))(worker, workers);
      },
      &body);
}

// Worker `worker`'s share of [0, count) when it is cut into `workers` contiguous ranges whose
// sizes differ by at most one (OpenMP's schedule(static)).
struct IndexRange {
  int64_t begin, end;
};
IndexRange staticRange(int64_t count, int worker, int workers);

// Runs fn(i) for every i in [0, count), split as staticRange across the pool when `parallel`.
template <class F> void parallelFor(bool parallel, int64_t count, F &&fn) {
  parallelRun(parallel, [&](int worker, int workers) {
    const IndexRange range = staticRange(count, worker, workers);
    for (int64_t i = range.begin; i < range.end; ++i)
      fn(i);
  });
}

// Hands out [0, count) in chunks to whichever worker asks next (OpenMP's schedule(dynamic)), for
// work whose cost varies by index. Shared by the workers of one parallelRun.
class DynamicRanges {
public:
  DynamicRanges(int64_t count, int64_t chunk) : count_(count), chunk_(chunk) {}
  // The next chunk; false when none is left.
  bool next(IndexRange &range) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= count_)
      return false;
    range = {begin, begin + chunk_ < count_ ? begin + chunk_ : count_};
    return true;
  }

private:
  const int64_t count_;
  const int64_t chunk_;
  std::atomic<int64_t> next_{0};
};

} // namespace kiln::kernels::cpu
