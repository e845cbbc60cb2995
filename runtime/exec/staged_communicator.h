// Collectives for ranks on any devices (two ranks on one GPU, GPUs without NCCL, cpu devices):
// each rank copies its input to a host staging buffer with its own Device::copyToHost, the ranks
// run CpuCommunicator's math on the staging buffers (rank-order sums in fp32, gathered columns),
// and each rank copies its result back with copyToDevice. So its results are bit-identical to the
// CpuCommunicator's, and its timeouts and aborts are the CpuCommunicator's.
//
// Slower than NCCL (two host copies per collective and a barrier on the host), but it needs no
// peer access and no library: MultiRankRunner picks it when NCCL cannot serve the placement.
#pragma once

#include "runtime/exec/communicator.h"

#include <memory>
#include <vector>

namespace kiln::rt {

class StagedCommunicator final : public Communicator {
public:
  // `devices[r]` is rank r's device (not owned, must outlive the communicator). The staging
  // buffers are sized from `sizes` here, once: a collective larger than them fails, it never
  // allocates while serving.
  static Result<std::unique_ptr<StagedCommunicator>> create(std::vector<Device *> devices,
                                                            const CollectiveSizes &sizes,
                                                            std::chrono::milliseconds timeout);

  int worldSize() const override { return host_.worldSize(); }
  bool supports(DeviceKind) const override { return true; }
  Status allReduceSum(int rank, const void *in, void *out, size_t count,
                      schema::DType dtype) override;
  Status allGatherColumns(int rank, const void *in, void *out, size_t rows, size_t inWidth,
                          size_t outWidth, schema::DType dtype) override;
  void abort(int rank, const Status &reason) override { host_.abort(rank, reason); }
  Status failure() const override { return host_.failure(); }
  void reset() override { host_.reset(); }

private:
  StagedCommunicator(std::vector<Device *> devices, const CollectiveSizes &sizes,
                     std::chrono::milliseconds timeout);
  // Checks the rank and that `inBytes`/`outBytes` fit the staging buffers, then stages `in`.
  // On failure aborts the collective so the partners stop waiting for this rank.
  Status stageIn(int rank, const void *in, size_t inBytes, size_t outBytes, const char *what);
  Status stageOut(int rank, void *out, size_t outBytes);

  CpuCommunicator host_;
  std::vector<Device *> devices_;
  std::vector<std::vector<uint8_t>> stagingIn_, stagingOut_; // per rank
};

} // namespace kiln::rt
