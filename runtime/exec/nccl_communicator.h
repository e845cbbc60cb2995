// Collectives for ranks on distinct GPUs through NCCL, loaded at run time (dlopen libnccl.so.2;
// nccl.h gives the types only) so a kiln built with CUDA still starts without NCCL and falls
// back to StagedCommunicator.
//
// One process, one thread per rank: the ranks' communicators are created together (one unique
// id, ncclCommInitRankConfig per rank inside one group, which is what ncclCommInitAll does, but
// with the non-blocking config ncclCommInitAll cannot take). Every call is enqueued on the rank's
// device stream and then polled (cuStreamQuery, ncclCommGetAsyncError) against the timeout, so a
// rank that never arrives fails its partners' collectives, which ncclCommAbort their
// communicators: a dead rank never hangs the engine. reset() rebuilds aborted communicators.
//
// Not yet run with the real NCCL: no machine with two GPUs has been available. CI runs it on
// two simulated GPUs against cudasim's NCCL (tools/cudasim/sim_nccl.cc, which checks devices,
// streams, buffers and call order as documented in docs/cudasim.md):
// tests/runtime/exec/nccl_communicator_gpu.cc (sums, gathers, timeouts, aborts, reset) and
// tests/e2e/tp_gpu_test.cc (tp 2 on two GPUs against tp 1); both run on real GPUs as they are.
#pragma once

#include "runtime/exec/communicator.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

struct NcclOptions {
  std::string library = "libnccl.so.2";
  std::chrono::milliseconds timeout{60000};
};

// Whether NCCL can be loaded: its version ("2.28.9"), or "NCCL unavailable: cannot load
// <library> (dlopen: ...)", a missing entry point, or a kiln built without the CUDA backend.
Result<std::string> probeNccl(const std::string &library = "libnccl.so.2");

class NcclCommunicator final : public Communicator {
public:
  // `devices[r]` is rank r's device: CUDA devices on distinct GPUs (`ordinals[r]`, for messages
  // and the distinctness check). Not owned; they must outlive the communicator. The all_gather
  // staging buffers (one per rank, world size x sizes.maxInputBytes) are allocated here.
  // Every error starts with "NCCL unavailable: ".
  static Result<std::unique_ptr<NcclCommunicator>> create(const std::vector<Device *> &devices,
                                                          const std::vector<int> &ordinals,
                                                          const CollectiveSizes &sizes,
                                                          const NcclOptions &options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int worldSize() const override;
  bool supports(DeviceKind kind) const override { return kind == DeviceKind::kCuda; }
  // On the stream of the rank's CudaDevice, the one its executor's ops run on.
  bool queuesBehindDeviceWork() const override { return true; }
  Status allReduceSum(int rank, const void *in, void *out, size_t count,
                      schema::DType dtype) override;
  Status allGatherColumns(int rank, const void *in, void *out, size_t rows, size_t inWidth,
                          size_t outWidth, schema::DType dtype) override;
  void abort(int rank, const Status &reason) override;
  Status failure() const override;
  void reset() override;

  // "NCCL 2.28.9 over GPUs 0, 1", for the runner's log line.
  const std::string &description() const;

private:
  struct State;
  explicit NcclCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

} // namespace kiln::rt
