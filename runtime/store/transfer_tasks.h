// What push (runtime/store/push.cc) and pull (runtime/store/transfer.cc) share: a pool that runs
// transfer tasks with cancellation and a progress tick, and the byte/file counters it reports.
#pragma once

#include "runtime/base/status.h"
#include "runtime/store/s3_client.h"
#include "runtime/store/transfer.h"

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

namespace kiln::rt::detail {

using Task = std::function<Status()>;

// Runs tasks on up to `parallelism` threads. The first failure cancels the client (so parts in
// flight stop) and is returned. `tick` runs on the calling thread about once a second; a set
// `interrupted` cancels everything and returns kCancelled.
Status runTasks(std::vector<Task> &tasks, int parallelism, S3Client &client,
                const std::function<void()> &tick, const std::atomic<bool> *interrupted);

struct Progress {
  const char *action;
  const TransferOptions &options;
  uint64_t total = 0;
  int files = 0;
  S3Client::ByteCounter bytes{0};
  std::atomic<int> filesDone{0};

  void report(bool finished);
};

// A re-push stages a changed file at PREFIX/.kiln/objects/<sha256> until its manifest is published
// (runtime/store/push.cc); a pull reads a file from there when it finds it. An empty `sha256`
// gives the folder's prefix, for listing.
std::string stagedObjectKey(const S3Location &at, const std::string &sha256);

// A client for `options` (credentials, region, endpoint); refuses a part size below S3's minimum.
Result<std::unique_ptr<S3Client>> makeClient(const TransferOptions &options);

} // namespace kiln::rt::detail
