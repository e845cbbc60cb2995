#include "runtime/serve/thread_pool.h"

namespace kiln::rt::serve {

void GrowingThreadPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(fn));
    // Jobs already queued claim idle threads first.
    if (idle_ < jobs_.size() && threads_.size() < maxThreads_)
      threads_.emplace_back([this] { work(); });
  }
  ready_.notify_one();
}

void GrowingThreadPool::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    ready_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
    --idle_;
    if (jobs_.empty())
      return; // stopping, nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

void GrowingThreadPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  // Threads are only added by enqueue(), which httplib stops calling before shutdown().
  {
    std::lock_guard<std::mutex> lock(mutex_);
    threads.swap(threads_);
  }
  for (std::thread &t : threads)
    if (t.joinable())
      t.join();
}

size_t GrowingThreadPool::threadCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size();
}

} // namespace kiln::rt::serve
