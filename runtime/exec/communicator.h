// Collectives between the tensor-parallel ranks of one step (plan.fbs AllReduce / AllGather),
// behind one interface: CpuCommunicator for ranks that are threads of this process on cpu
// devices, StagedCommunicator (staged_communicator.h) for ranks on any devices through host
// copies, NcclCommunicator (nccl_communicator.h) for ranks on distinct GPUs. Every call can fail,
// never hangs: a rank that does not arrive within the timeout, or that aborts after a failure of
// its own, fails the collective on every rank with a message naming the rank.
#pragma once

#include "runtime/base/status.h"
#include "runtime/hal/device.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kiln::rt {

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int worldSize() const = 0;
  // Whether the collectives can read and write memory of a device of `kind`.
  virtual bool supports(DeviceKind kind) const = 0;
  // Whether a collective is queued on the rank's device stream behind the ops queued before it
  // (NCCL), so the caller need not wait for those ops first. When false, the communicator reads
  // and writes the buffers itself, and the caller synchronizes the device before each call.
  virtual bool queuesBehindDeviceWork() const { return false; }

  // Every rank passes its own `in` and `out` (`count` elements of `dtype` each: F32, F16 or
  // BF16); afterwards every rank's out holds in_0 + in_1 + ... (bit-identical on every rank).
  // The cpu communicator sums in rank order in fp32 and rounds half types once at the end.
  virtual Status allReduceSum(int rank, const void *in, void *out, size_t count,
                              schema::DType dtype) = 0;
  // out[i, r*inWidth + j] = in_r[i, j] for r*inWidth + j < outWidth, for i < rows.
  virtual Status allGatherColumns(int rank, const void *in, void *out, size_t rows,
                                  size_t inWidth, size_t outWidth, schema::DType dtype) = 0;

  // Fails every collective in flight and every later one until reset(): a rank that failed calls
  // it so its partners stop waiting at once. The first reason is kept (failure()).
  virtual void abort(int rank, const Status &reason) = 0;
  // The first abort reason (a timeout is one) since the last reset(); ok when none.
  virtual Status failure() const = 0;
  // Makes a failed communicator usable again. Only between steps, while no rank is inside a call.
  virtual void reset() = 0;
};

// The largest collective input and output of any rank's program, in bytes at the compiled
// maxima: what a communicator that stages buffers allocates once at load.
struct CollectiveSizes {
  size_t maxInputBytes = 0;
  size_t maxOutputBytes = 0;
};
CollectiveSizes collectiveSizes(const schema::Plan &plan);

// Ranks as threads of one process sharing host memory (F32, F16, BF16 buffers): each rank publishes its buffers, waits at
// a barrier, does its share of the work reading every rank's buffers, and waits again (so no
// rank reuses a buffer that a partner still reads).
class CpuCommunicator final : public Communicator {
public:
  CpuCommunicator(int worldSize, std::chrono::milliseconds timeout);

  int worldSize() const override { return worldSize_; }
  bool supports(DeviceKind kind) const override { return kind == DeviceKind::kCpu; }
  Status allReduceSum(int rank, const void *in, void *out, size_t count,
                      schema::DType dtype) override;
  Status allGatherColumns(int rank, const void *in, void *out, size_t rows, size_t inWidth,
                          size_t outWidth, schema::DType dtype) override;
  void abort(int rank, const Status &reason) override;
  Status failure() const override;
  void reset() override;

private:
  struct Slot {
    const void *in = nullptr;
    void *out = nullptr;
    size_t rows = 0, inWidth = 0, outWidth = 0;
    schema::DType dtype = schema::DType::F32;
  };
  Status checkRank(int rank, const char *what) const;
  // Publishes `slot` (when given) and waits until every rank arrived, the timeout passed or a
  // rank aborted. `what` names the collective in the timeout message.
  Status arrive(int rank, const Slot *slot, const char *what);
  Status checkSameShape(int rank, const char *what);
  // Sums elements [begin, end) over every rank's input in rank order into every rank's output.
  void sumChunk(size_t begin, size_t end);

  const int worldSize_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<Slot> slots_;
  std::vector<bool> present_; // who has arrived at the current barrier
  int count_ = 0;
  uint64_t generation_ = 0;
  Status failure_;
};

} // namespace kiln::rt
