#include "tools/cudasim/grid_runner.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

// Switching fibers: on x86-64 a switch of the callee-saved registers and the stack pointer
// (about 20x faster than swapcontext, which makes a signal-mask system call every time); other
// machines use ucontext.
#if defined(__x86_64__)
extern "C" void kiln_cudasim_switch(void **saveStack, void *loadStack);
asm(R"(
  .text
  .globl kiln_cudasim_switch
  .hidden kiln_cudasim_switch
  .type kiln_cudasim_switch, @function
kiln_cudasim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_cudasim_switch, .-kiln_cudasim_switch
)");
#endif

namespace kiln::cudasim {
namespace {

using kiln_cudasim::ThreadContext;

// Where a suspended fiber (or the scheduler) resumes.
struct Context {
#if defined(__x86_64__)
  void *stack = nullptr;
#else
  ucontext_t context{};
#endif
};

// Prepares `context` to run `entry` (which must never return) on [stack, stack + bytes).
void makeContext(Context &context, char *stack, size_t bytes, void (*entry)()) {
#if defined(__x86_64__)
  // As if `entry` had been called: its return address slot (never used) keeps the ABI's 16-byte
  // alignment, then the address the switch returns to, then six callee-saved registers.
  auto *top = reinterpret_cast<void **>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15});
  top[-1] = nullptr;
  top[-2] = reinterpret_cast<void *>(entry);
  for (int i = 3; i <= 8; ++i)
    top[-i] = nullptr;
  context.stack = top - 8;
#else
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, entry, 0);
#endif
}

void switchContext(Context &from, Context &to) {
#if defined(__x86_64__)
  kiln_cudasim_switch(&from.stack, to.stack);
#else
  swapcontext(&from.context, &to.context);
#endif
}

constexpr int kWarpSize = 32;
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 64 * 1024; // below each stack: an overflow faults, never corrupts

enum class Wait : uint8_t { kRunnable, kBlockBarrier, kWarp, kExited };
enum class WarpOp : uint8_t { kSync, kShuffle, kBallot };

const char *warpOpName(WarpOp op) {
  switch (op) {
  case WarpOp::kSync:
    return "__syncwarp";
  case WarpOp::kShuffle:
    return "__shfl*_sync";
  case WarpOp::kBallot:
    return "__ballot_sync";
  }
  return "?";
}

struct Fiber {
  Context context;
  ThreadContext thread;
  Wait wait = Wait::kRunnable;
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  unsigned bits = 0; // shuffle: the value passed; ballot: the predicate
  int source = 0;    // shuffle: the lane read
  unsigned result = 0;
};

// Fiber stacks, kept per OS thread for the life of the process (mmap'd once, reused by every
// block): at most 1024 threads per block.
class StackPool {
public:
  ~StackPool() {
    for (void *region : regions_)
      munmap(region, kStackBytes + kGuardBytes);
  }
  char *stack(size_t index) {
    while (regions_.size() <= index) {
      void *region = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (region == MAP_FAILED)
        return nullptr;
      mprotect(region, kGuardBytes, PROT_NONE);
      regions_.push_back(region);
    }
    return static_cast<char *>(regions_[index]) + kGuardBytes;
  }

private:
  std::vector<void *> regions_;
};

std::string dim3Text(const Dim3 &d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

std::string hexMask(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

// One block of a launch: its threads as fibers, scheduled round robin between barriers.
class BlockRun {
public:
  BlockRun(const std::string &name, KernelEntry entry, const void *params, Dim3 grid, Dim3 block,
           StackPool &stacks)
      : name_(name), entry_(entry), params_(params), grid_(grid), block_(block), stacks_(stacks),
        fibers_(static_cast<size_t>(block.x) * block.y * block.z) {}

  Status run(Dim3 blockIdx);

  // Device API, called from the running fiber.
  ThreadContext *current() { return &fibers_[running_].thread; }
  void suspend(Wait wait) {
    Fiber &fiber = fibers_[running_];
    fiber.wait = wait;
    switchContext(fiber.context, scheduler_);
  }
  unsigned warpCall(WarpOp op, unsigned mask, unsigned bits, int source) {
    Fiber &fiber = fibers_[running_];
    fiber.op = op;
    fiber.mask = mask;
    fiber.bits = bits;
    fiber.source = source;
    suspend(Wait::kWarp);
    return fibers_[running_].result;
  }
  [[noreturn]] void trap(const std::string &what) {
    error_ = where(running_) + ": " + what;
    Fiber &fiber = fibers_[running_];
    fiber.wait = Wait::kExited;
    switchContext(fiber.context, scheduler_);
    std::abort(); // an exited fiber is never resumed
  }
  std::string whereRunning() const { return where(running_); }
  std::string where(size_t fiber) const {
    return "kernel " + name_ + " block " + dim3Text(fibers_[fiber].thread.blockIdx) +
           " thread " + dim3Text(fibers_[fiber].thread.threadIdx);
  }

private:
  static void fiberMain();
  Status start(Dim3 blockIdx);
  int releaseWarps(std::string &problem);
  bool releaseBlockBarrier();
  std::string describeWarp(size_t warp) const;
  Status deadlock(const std::string &problem) const;

  std::string name_;
  KernelEntry entry_;
  const void *params_;
  Dim3 grid_;
  Dim3 block_;
  StackPool &stacks_;
  std::vector<Fiber> fibers_;
  size_t running_ = 0;
  Context scheduler_;
  std::string error_;
};

thread_local BlockRun *activeRun = nullptr;

void BlockRun::fiberMain() {
  BlockRun *run = activeRun;
  run->entry_(run->params_);
  Fiber &fiber = run->fibers_[run->running_];
  fiber.wait = Wait::kExited;
  switchContext(fiber.context, run->scheduler_);
  std::abort(); // an exited fiber is never resumed
}

Status BlockRun::start(Dim3 blockIdx) {
  error_.clear();
  for (size_t i = 0; i < fibers_.size(); ++i) {
    Fiber &fiber = fibers_[i];
    const unsigned linear = static_cast<unsigned>(i);
    fiber.thread.threadIdx = {linear % block_.x, linear / block_.x % block_.y,
                              linear / (block_.x * block_.y)};
    fiber.thread.blockIdx = blockIdx;
    fiber.thread.blockDim = block_;
    fiber.thread.gridDim = grid_;
    fiber.wait = Wait::kRunnable;
    char *stack = stacks_.stack(i);
    if (!stack)
      return resourceExhausted("cudasim: no memory for the stack of thread " + std::to_string(i));
    makeContext(fiber.context, stack, kStackBytes, &BlockRun::fiberMain);
  }
  return okStatus();
}

Status BlockRun::run(Dim3 blockIdx) {
  KILN_RETURN_IF_ERROR(start(blockIdx));
  BlockRun *outer = activeRun;
  activeRun = this;
  Status status = okStatus();
  while (status.isOk()) {
    bool anyLive = false;
    for (size_t i = 0; i < fibers_.size(); ++i) {
      if (fibers_[i].wait != Wait::kRunnable)
        continue;
      running_ = i;
      switchContext(scheduler_, fibers_[i].context);
      if (!error_.empty())
        break;
    }
    if (!error_.empty()) {
      status = internalError(error_);
      break;
    }
    for (const Fiber &fiber : fibers_)
      anyLive = anyLive || fiber.wait != Wait::kExited;
    if (!anyLive)
      break;
    std::string problem;
    if (releaseWarps(problem) > 0 || releaseBlockBarrier())
      continue;
    status = deadlock(problem);
  }
  activeRun = outer;
  return status;
}

// Completes every warp collective whose lanes (its mask) have all arrived with the same mask
// and operation. Returns how many groups completed; `problem` describes one that cannot.
int BlockRun::releaseWarps(std::string &problem) {
  int released = 0;
  for (size_t lead = 0; lead < fibers_.size(); ++lead) {
    const Fiber &first = fibers_[lead];
    if (first.wait != Wait::kWarp)
      continue;
    const size_t base = lead / kWarpSize * kWarpSize;
    const unsigned mask = first.mask;
    bool complete = (mask >> (lead - base) & 1u) != 0;
    if (!complete)
      problem = where(lead) + " calls " + warpOpName(first.op) + " with mask " + hexMask(mask) +
                " that leaves out its own lane";
    unsigned ballot = 0;
    for (int lane = 0; lane < kWarpSize && complete; ++lane) {
      if (!(mask >> lane & 1u))
        continue;
      const size_t index = base + static_cast<size_t>(lane);
      if (index >= fibers_.size() || fibers_[index].wait != Wait::kWarp ||
          fibers_[index].mask != mask || fibers_[index].op != first.op) {
        complete = false;
        problem = "warp " + std::to_string(lead / kWarpSize) + " cannot complete " +
                  warpOpName(first.op) + " with mask " + hexMask(mask);
        break;
      }
      if (fibers_[index].bits != 0)
        ballot |= 1u << lane;
    }
    if (!complete)
      continue;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (!(mask >> lane & 1u))
        continue;
      Fiber &fiber = fibers_[base + static_cast<size_t>(lane)];
      if (first.op == WarpOp::kShuffle) {
        if (fiber.source < 0 || fiber.source >= kWarpSize || !(mask >> fiber.source & 1u)) {
          error_ = where(base + lane) + ": __shfl*_sync reads lane " +
                   std::to_string(fiber.source) + ", outside its mask " + hexMask(mask);
          return 0;
        }
        fiber.result = fibers_[base + static_cast<size_t>(fiber.source)].bits;
      } else if (first.op == WarpOp::kBallot) {
        fiber.result = ballot;
      }
    }
    for (int lane = 0; lane < kWarpSize; ++lane)
      if (mask >> lane & 1u)
        fibers_[base + static_cast<size_t>(lane)].wait = Wait::kRunnable;
    ++released;
  }
  return released;
}

// __syncthreads completes when every thread that has not exited waits at it (exited threads
// count as arrived, as on the hardware).
bool BlockRun::releaseBlockBarrier() {
  bool any = false;
  for (const Fiber &fiber : fibers_) {
    if (fiber.wait == Wait::kExited)
      continue;
    if (fiber.wait != Wait::kBlockBarrier)
      return false;
    any = true;
  }
  for (Fiber &fiber : fibers_)
    if (fiber.wait == Wait::kBlockBarrier)
      fiber.wait = Wait::kRunnable;
  return any;
}

// "lanes 0-15 __syncthreads; lanes 16-31 exited" for one warp.
std::string BlockRun::describeWarp(size_t warp) const {
  auto state = [&](size_t i) {
    const Fiber &f = fibers_[i];
    switch (f.wait) {
    case Wait::kRunnable:
      return std::string("running");
    case Wait::kBlockBarrier:
      return std::string("__syncthreads");
    case Wait::kExited:
      return std::string("exited");
    case Wait::kWarp:
      return std::string(warpOpName(f.op)) + "(mask " + hexMask(f.mask) + ")";
    }
    return std::string("?");
  };
  std::string text;
  const size_t begin = warp * kWarpSize;
  const size_t end = std::min(fibers_.size(), begin + kWarpSize);
  for (size_t i = begin; i < end;) {
    size_t j = i;
    while (j + 1 < end && state(j + 1) == state(i))
      ++j;
    text += (text.empty() ? "" : ", ") + std::string("lanes ") + std::to_string(i - begin) + "-" +
            std::to_string(j - begin) + " " + state(i);
    i = j + 1;
  }
  return text;
}

Status BlockRun::deadlock(const std::string &problem) const {
  if (!error_.empty())
    return internalError(error_);
  std::string text = "kernel " + name_ + " block " + dim3Text(fibers_.front().thread.blockIdx) +
                     " deadlocks";
  if (!problem.empty())
    text += " (" + problem + ")";
  text += "; warps:";
  for (size_t warp = 0; warp * kWarpSize < fibers_.size(); ++warp)
    text += "\n  warp " + std::to_string(warp) + ": " + describeWarp(warp);
  return internalError(text);
}

ThreadContext *apiCurrent() {
  return activeRun->current();
}
void apiSyncThreads() {
  activeRun->suspend(Wait::kBlockBarrier);
}
void apiSyncWarp(unsigned mask) {
  activeRun->warpCall(WarpOp::kSync, mask, 0, 0);
}
unsigned apiShuffle(unsigned mask, unsigned bits, int source) {
  return activeRun->warpCall(WarpOp::kShuffle, mask, bits, source);
}
unsigned apiBallot(unsigned mask, int predicate) {
  return activeRun->warpCall(WarpOp::kBallot, mask, predicate != 0 ? 1u : 0u, 0);
}
[[noreturn]] void apiTrap(const char *what) {
  activeRun->trap(what);
}

const kiln_cudasim::DeviceApi kApi = {apiCurrent, apiSyncThreads, apiSyncWarp,
                                      apiShuffle, apiBallot,      apiTrap};

// A fault inside a simulated kernel (an out-of-bounds access hitting a guard page) names the
// kernel and thread before the process dies, as compute-sanitizer would.
void onFault(int signal, siginfo_t *info, void *) {
  if (BlockRun *run = activeRun) {
    // Not async-signal-safe, but the process is going down with this fault either way.
    char text[512];
    const int n = std::snprintf(text, sizeof text, "cudasim: %s: invalid memory access at %p\n",
                                run->whereRunning().c_str(), info->si_addr);
    if (n > 0)
      (void)!write(STDERR_FILENO, text, static_cast<size_t>(n));
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(signal, &fallback, nullptr);
}

void installFaultReporter() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = onFault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
  });
  // The handler runs on an alternate stack: a fiber's overflow leaves no stack to run it on.
  thread_local std::vector<char> alternate;
  if (alternate.empty()) {
    alternate.resize(64 * 1024);
    stack_t stack{};
    stack.ss_sp = alternate.data();
    stack.ss_size = alternate.size();
    sigaltstack(&stack, nullptr);
  }
}

Status checkDims(const std::string &name, Dim3 grid, Dim3 block, unsigned maxThreads) {
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  auto bad = [&](const std::string &what) {
    return invalidArgument("launch of " + name + " with grid " + dim3Text(grid) + " block " +
                           dim3Text(block) + ": " + what);
  };
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    return bad("a dimension is 0");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return bad("grid over (2^31 - 1, 65535, 65535)");
  if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
    return bad("block over 1024 threads or (1024, 1024, 64)");
  if (maxThreads > 0 && threads > maxThreads)
    return bad(std::to_string(threads) + " threads exceed the kernel's __launch_bounds__ of " +
               std::to_string(maxThreads) + " (a GPU fails this launch: too many resources)");
  return okStatus();
}

} // namespace

const kiln_cudasim::DeviceApi &deviceApi() {
  return kApi;
}

Status runGrid(const std::string &name, KernelEntry entry, const void *params, Dim3 grid,
               Dim3 block, unsigned maxThreads) {
  KILN_RETURN_IF_ERROR(checkDims(name, grid, block, maxThreads));
  static std::mutex serial;
  std::lock_guard<std::mutex> lock(serial);
  installFaultReporter();
  thread_local StackPool stacks;
  BlockRun run(name, entry, params, grid, block, stacks);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x)
        KILN_RETURN_IF_ERROR(run.run(Dim3{x, y, z}));
  return okStatus();
}

} // namespace kiln::cudasim
