// httplib's task queue, growing on demand: httplib holds one pool thread per connection for the
// connection's whole life (a stream keeps it until its last chunk), so a fixed pool either stalls
// the N+1th stream or pre-spawns thousands of threads. This pool starts empty, adds a thread when
// a connection arrives and none is idle (up to a cap), and keeps idle threads for reuse.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::rt::serve {

class GrowingThreadPool : public httplib::TaskQueue {
public:
  explicit GrowingThreadPool(size_t maxThreads) : maxThreads_(maxThreads) {}
  ~GrowingThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  // Runs every queued job, then joins the threads.
  void shutdown() override;

  size_t threadCount() const;

private:
  void work();

  const size_t maxThreads_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

} // namespace kiln::rt::serve
