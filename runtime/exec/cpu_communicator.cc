#include "runtime/exec/communicator.h"

#include "runtime/exec/elements.h"
#include "runtime/ops/op_table.h"

#include <algorithm>
#include <cstring>

namespace kiln::rt {
namespace {

using schema::DType;

Status checkDtype(DType dtype, const char *what) {
  if (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16)
    return okStatus();
  return invalidArgument(std::string("tensor-parallel ") + what +
                         ": buffers must be F32, F16 or BF16");
}

} // namespace

CollectiveSizes collectiveSizes(const schema::Plan &plan) {
  CollectiveSizes sizes;
  for (const schema::Rank *rank : *plan.ranks()) {
    for (const schema::Op *op : *rank->program()) {
      if (const OpEntry *entry = findOp(op->params_type()); !entry || !entry->collective)
        continue;
      // Artifact::load verified every index against the buffer table.
      const schema::Buffer *in = rank->buffers()->Get(op->inputs()->Get(0));
      const schema::Buffer *out = rank->buffers()->Get(op->outputs()->Get(0));
      sizes.maxInputBytes = std::max<size_t>(sizes.maxInputBytes, in->size_bytes());
      sizes.maxOutputBytes = std::max<size_t>(sizes.maxOutputBytes, out->size_bytes());
    }
  }
  return sizes;
}

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
        other.outWidth != mine.outWidth || other.dtype != mine.dtype) {
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

void CpuCommunicator::sumChunk(size_t begin, size_t end) {
  DType dtype = slots_[0].dtype;
  for (size_t i = begin; i < end; ++i) {
    float sum = loadElement(slots_[0].in, i, dtype);
    for (int r = 1; r < worldSize_; ++r)
      sum += loadElement(slots_[r].in, i, dtype);
    for (int r = 0; r < worldSize_; ++r)
      storeElement(slots_[r].out, i, sum, dtype);
  }
}

Status CpuCommunicator::allReduceSum(int rank, const void *in, void *out, size_t count,
                                     DType dtype) {
  KILN_RETURN_IF_ERROR(checkRank(rank, "all_reduce"));
  KILN_RETURN_IF_ERROR(checkDtype(dtype, "all_reduce"));
  Slot slot{in, out, 1, count, count, dtype};
  KILN_RETURN_IF_ERROR(arrive(rank, &slot, "all_reduce"));
  KILN_RETURN_IF_ERROR(checkSameShape(rank, "all_reduce"));
  // Rank r sums its chunk over every rank's input, in rank order, and writes it to every output.
  sumChunk(count * rank / worldSize_, count * (rank + 1) / worldSize_);
  return arrive(rank, nullptr, "all_reduce");
}

Status CpuCommunicator::allGatherColumns(int rank, const void *in, void *out, size_t rows,
                                         size_t inWidth, size_t outWidth, DType dtype) {
  KILN_RETURN_IF_ERROR(checkRank(rank, "all_gather"));
  KILN_RETURN_IF_ERROR(checkDtype(dtype, "all_gather"));
  if (outWidth > inWidth * worldSize_)
    return invalidArgument("tensor-parallel all_gather: output width " + std::to_string(outWidth) +
                           " exceeds " + std::to_string(worldSize_) + " ranks x " +
                           std::to_string(inWidth));
  Slot slot{in, out, rows, inWidth, outWidth, dtype};
  KILN_RETURN_IF_ERROR(arrive(rank, &slot, "all_gather"));
  KILN_RETURN_IF_ERROR(checkSameShape(rank, "all_gather"));
  // Each rank fills its own output from every rank's shard.
  size_t bytes = elementBytes(dtype);
  auto *dst = static_cast<uint8_t *>(out);
  for (int r = 0; r < worldSize_; ++r) {
    size_t column = inWidth * r;
    if (column >= outWidth)
      break;
    size_t width = std::min(inWidth, outWidth - column);
    const auto *src = static_cast<const uint8_t *>(slots_[r].in);
    for (size_t i = 0; i < rows; ++i)
      std::memcpy(dst + (i * outWidth + column) * bytes, src + i * inWidth * bytes, width * bytes);
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
