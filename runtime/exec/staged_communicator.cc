#include "runtime/exec/staged_communicator.h"

namespace kiln::rt {
namespace {

size_t elementBytes(schema::DType dtype) {
  return dtype == schema::DType::F32 ? 4 : 2;
}

} // namespace

StagedCommunicator::StagedCommunicator(std::vector<Device *> devices, const CollectiveSizes &sizes,
                                       std::chrono::milliseconds timeout)
    : host_(static_cast<int>(devices.size()), timeout), devices_(std::move(devices)) {
  for (size_t r = 0; r < devices_.size(); ++r) {
    stagingIn_.emplace_back(sizes.maxInputBytes);
    stagingOut_.emplace_back(sizes.maxOutputBytes);
  }
}

Result<std::unique_ptr<StagedCommunicator>>
StagedCommunicator::create(std::vector<Device *> devices, const CollectiveSizes &sizes,
                           std::chrono::milliseconds timeout) {
  if (devices.empty())
    return invalidArgument("staged communicator: no ranks");
  for (size_t r = 0; r < devices.size(); ++r)
    if (!devices[r])
      return invalidArgument("staged communicator: rank " + std::to_string(r) + " has no device");
  if (timeout.count() <= 0)
    return invalidArgument("collective timeout must be positive, got " +
                           std::to_string(timeout.count()) + " ms");
  return std::unique_ptr<StagedCommunicator>(
      new StagedCommunicator(std::move(devices), sizes, timeout));
}

Status StagedCommunicator::stageIn(int rank, const void *in, size_t inBytes, size_t outBytes,
                                   const char *what) {
  if (rank < 0 || rank >= worldSize())
    return invalidArgument(std::string(what) + ": rank " + std::to_string(rank) +
                           " is not in [0, " + std::to_string(worldSize()) + ")");
  Status status;
  if (inBytes > stagingIn_[rank].size() || outBytes > stagingOut_[rank].size()) {
    status = invalidArgument("tensor-parallel " + std::string(what) + " on rank " +
                             std::to_string(rank) + ": " + std::to_string(inBytes) + " bytes in, " +
                             std::to_string(outBytes) +
                             " bytes out exceed the staging buffers sized from the plan (" +
                             std::to_string(stagingIn_[rank].size()) + " in, " +
                             std::to_string(stagingOut_[rank].size()) + " out)");
  } else {
    status = devices_[rank]->copyToHost(stagingIn_[rank].data(), in, inBytes);
    if (!status.isOk())
      status =
          status.withContext("rank " + std::to_string(rank) + ": staging the " + what + " input");
  }
  if (!status.isOk())
    abort(rank, status);
  return status;
}

Status StagedCommunicator::stageOut(int rank, void *out, size_t outBytes) {
  Status status = devices_[rank]->copyToDevice(out, stagingOut_[rank].data(), outBytes);
  if (!status.isOk()) {
    status = status.withContext("rank " + std::to_string(rank) +
                                ": copying a collective's result "
                                "back");
    abort(rank, status);
  }
  return status;
}

Status StagedCommunicator::allReduceSum(int rank, const void *in, void *out, size_t count,
                                        schema::DType dtype) {
  const size_t bytes = count * elementBytes(dtype);
  KILN_RETURN_IF_ERROR(stageIn(rank, in, bytes, bytes, "all_reduce"));
  KILN_RETURN_IF_ERROR(
      host_.allReduceSum(rank, stagingIn_[rank].data(), stagingOut_[rank].data(), count, dtype));
  return stageOut(rank, out, bytes);
}

Status StagedCommunicator::allGatherColumns(int rank, const void *in, void *out, size_t rows,
                                            size_t inWidth, size_t outWidth, schema::DType dtype) {
  const size_t elem = elementBytes(dtype);
  KILN_RETURN_IF_ERROR(
      stageIn(rank, in, rows * inWidth * elem, rows * outWidth * elem, "all_gather"));
  KILN_RETURN_IF_ERROR(host_.allGatherColumns(
      rank, stagingIn_[rank].data(), stagingOut_[rank].data(), rows, inWidth, outWidth, dtype));
  return stageOut(rank, out, rows * outWidth * elem);
}

} // namespace kiln::rt
