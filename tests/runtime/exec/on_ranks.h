// Runs one function per rank on its own thread, as the ranks of a tensor-parallel step do, so the
// communicator tests can meet in a collective.
#pragma once

#include "runtime/base/status.h"

#include <functional>
#include <thread>
#include <vector>

namespace kiln::rt::testing {

// Runs fn(rank) on one thread per rank and returns each rank's status.
inline std::vector<Status> onRanks(int n, const std::function<Status(int)> &fn) {
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { statuses[r] = fn(r); });
  for (std::thread &t : threads)
    t.join();
  return statuses;
}

} // namespace kiln::rt::testing
