#include "runtime/exec/communicator.h"

#include <algorithm>
#include <cstring>

namespace kiln::rt {

CpuCommunicator::CpuCommunicator(int worldSize, std::chrono::milliseconds timeout)
    : worldSize_(worldSize), timeout_(timeout), slots_(std::max(worldSize, 1)),
      present_(std::max(worldSize, 1), false) {}

Status CpuCommunicator::checkRank(int rank, const char *what) const {
  if (rank < 0 || rank >= worldSize_)
    return invalidArgument(std::string(what) + ": rank " + std::to_string(rank) +
                           " is not in [0, " + std::to_string(worldSize_) + ")");
  return okStatus();
}

Status CpuCommunicator::arrive(int rank, const Slot *slot, const char *what) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!failure_.isOk())
    return failure_;
  if (slot)
    slots_[rank] = *slot;
  uint64_t generation = generation_;
  present_[rank] = true;
  if (++count_ == worldSize_) {
    count_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    ++generation_;
    arrived_.notify_all();
    return okStatus();
  }
  bool released = arrived_.wait_for(lock, timeout_,
                                    [&] { return generation_ != generation || !failure_.isOk(); });
  if (generation_ != generation)
    return okStatus();
  if (released) // woken by an abort
    return failure_;
  std::string missing;
  for (int r = 0; r < worldSize_; ++r)
    if (!present_[r])
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  failure_ = unavailable("tensor-parallel " + std::string(what) + ": rank " + std::to_string(rank) +
                         " waited " + std::to_string(timeout_.count()) + " ms for rank(s) " +
                         missing + ", which failed or stalled");
  arrived_.notify_all();
  return failure_;
}

Status CpuCommunicator::checkSameShape(int rank, const char *what) {
  const Slot &mine = slots_[rank];
  for (int r = 0; r < worldSize_; ++r) {
    const Slot &other = slots_[r];
    if (other.rows != mine.rows || other.inWidth != mine.inWidth ||
        other.outWidth != mine.outWidth) {
      Status status = internalError(
          "tensor-parallel " + std::string(what) + ": rank " + std::to_string(r) + " passed " +
          std::to_string(other.rows) + "x" + std::to_string(other.inWidth) + " but rank " +
          std::to_string(rank) + " passed " + std::to_string(mine.rows) + "x" +
          std::to_string(mine.inWidth) + ": the ranks' plans disagree");
      abort(rank, status);
      return status;
    }
  }
  return okStatus();
}

Status CpuCommunicator::allReduceSum(int rank, const float *in, float *out, size_t count) {
  KILN_RETURN_IF_ERROR(checkRank(rank, "all_reduce"));
  Slot slot{in, out, 1, count, count};
  KILN_RETURN_IF_ERROR(arrive(rank, &slot, "all_reduce"));
  KILN_RETURN_IF_ERROR(checkSameShape(rank, "all_reduce"));
  // Rank r sums its chunk over every rank's input, in rank order, and writes it to every output.
  size_t begin = count * rank / worldSize_, end = count * (rank + 1) / worldSize_;
  if (end > begin) {
    float *sum = slots_[0].out + begin;
    const float *first = slots_[0].in + begin;
    std::copy(first, first + (end - begin), sum);
    for (int r = 1; r < worldSize_; ++r) {
      const float *part = slots_[r].in + begin;
      for (size_t i = 0; i < end - begin; ++i)
        sum[i] += part[i];
    }
    for (int r = 1; r < worldSize_; ++r)
      std::memcpy(slots_[r].out + begin, sum, (end - begin) * sizeof(float));
  }
  return arrive(rank, nullptr, "all_reduce");
}

Status CpuCommunicator::allGatherColumns(int rank, const float *in, float *out, size_t rows,
                                         size_t inWidth, size_t outWidth) {
  KILN_RETURN_IF_ERROR(checkRank(rank, "all_gather"));
  if (outWidth > inWidth * worldSize_)
    return invalidArgument("tensor-parallel all_gather: output width " + std::to_string(outWidth) +
                           " exceeds " + std::to_string(worldSize_) + " ranks x " +
                           std::to_string(inWidth));
  Slot slot{in, out, rows, inWidth, outWidth};
  KILN_RETURN_IF_ERROR(arrive(rank, &slot, "all_gather"));
  KILN_RETURN_IF_ERROR(checkSameShape(rank, "all_gather"));
  // Each rank fills its own output from every rank's shard.
  for (int r = 0; r < worldSize_; ++r) {
    size_t column = inWidth * r;
    if (column >= outWidth)
      break;
    size_t width = std::min(inWidth, outWidth - column);
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(out + i * outWidth + column, slots_[r].in + i * inWidth, width * sizeof(float));
  }
  return arrive(rank, nullptr, "all_gather");
}

void CpuCommunicator::abort(int rank, const Status &reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.isOk())
    failure_ = reason.isOk() ? cancelled("rank " + std::to_string(rank) + " aborted") : reason;
  arrived_.notify_all();
}

Status CpuCommunicator::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void CpuCommunicator::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = okStatus();
  count_ = 0;
  std::fill(present_.begin(), present_.end(), false);
  ++generation_;
}

} // namespace kiln::rt
