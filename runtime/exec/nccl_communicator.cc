// Not yet run with the real NCCL: see nccl_communicator.h. Every NCCL and driver call is checked.
#include "runtime/exec/nccl_communicator.h"

#include "runtime/base/shared_library.h"

#ifdef KILN_HAVE_CUDA_BACKEND
#include "runtime/hal/cuda/cuda_device.h"

#include <dlfcn.h>
#include <nccl.h>
#endif

#include <mutex>
#include <thread>

namespace kiln::rt {

#ifndef KILN_HAVE_CUDA_BACKEND

struct NcclCommunicator::State {
  std::string description;
};

namespace {
Status noCudaBackend() {
  return unavailable("NCCL unavailable: this kiln was built without the CUDA backend "
                     "(-DKILN_ENABLE_CUDA=ON)");
}
} // namespace

Result<std::string> probeNccl(const std::string &) {
  return noCudaBackend();
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const std::vector<Device *> &,
                                                                   const std::vector<int> &,
                                                                   const CollectiveSizes &,
                                                                   const NcclOptions &) {
  return noCudaBackend();
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}
NcclCommunicator::~NcclCommunicator() = default;
int NcclCommunicator::worldSize() const {
  return 0;
}
Status NcclCommunicator::allReduceSum(int, const void *, void *, size_t, schema::DType) {
  return noCudaBackend();
}
Status NcclCommunicator::allGatherColumns(int, const void *, void *, size_t, size_t, size_t,
                                          schema::DType) {
  return noCudaBackend();
}
void NcclCommunicator::abort(int, const Status &) {}
Status NcclCommunicator::failure() const {
  return noCudaBackend();
}
void NcclCommunicator::reset() {}
const std::string &NcclCommunicator::description() const {
  return state_->description;
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// X(member, exported symbol, the nccl.h declaration that gives the member's type)
#define KILN_NCCL_FUNCTIONS(X)                                                                     \
  X(getVersion, "ncclGetVersion", ncclGetVersion)                                                  \
  X(getErrorString, "ncclGetErrorString", ncclGetErrorString)                                      \
  X(getUniqueId, "ncclGetUniqueId", ncclGetUniqueId)                                               \
  X(commInitRankConfig, "ncclCommInitRankConfig", ncclCommInitRankConfig)                          \
  X(groupStart, "ncclGroupStart", ncclGroupStart)                                                  \
  X(groupEnd, "ncclGroupEnd", ncclGroupEnd)                                                        \
  X(commGetAsyncError, "ncclCommGetAsyncError", ncclCommGetAsyncError)                             \
  X(commFinalize, "ncclCommFinalize", ncclCommFinalize)                                            \
  X(commDestroy, "ncclCommDestroy", ncclCommDestroy)                                               \
  X(commAbort, "ncclCommAbort", ncclCommAbort)                                                     \
  X(allReduce, "ncclAllReduce", ncclAllReduce)                                                     \
  X(allGather, "ncclAllGather", ncclAllGather)

class NcclLibrary {
public:
  static Result<std::shared_ptr<const NcclLibrary>> load(const std::string &library) {
    // RTLD_NODELETE: threads NCCL starts may outlive ncclCommDestroy; its code must stay mapped.
    Result<SharedLibrary> opened = SharedLibrary::open(library, RTLD_NODELETE);
    if (!opened.isOk())
      return unavailable("NCCL unavailable: cannot load " + library +
                         " (dlopen: " + opened.status().message() + ")");
    std::shared_ptr<NcclLibrary> nccl(new NcclLibrary());
    nccl->library_ = std::move(opened).value();
#define KILN_NCCL_RESOLVE(member, exported, decl)                                                  \
  nccl->member = reinterpret_cast<decltype(nccl->member)>(nccl->library_.symbol(exported));        \
  if (!nccl->member)                                                                               \
    return unavailable("NCCL unavailable: " + library + " lacks " + exported +                     \
                       " (kiln needs NCCL >= 2.14)");
    KILN_NCCL_FUNCTIONS(KILN_NCCL_RESOLVE)
#undef KILN_NCCL_RESOLVE
    return std::shared_ptr<const NcclLibrary>(std::move(nccl));
  }
#define KILN_NCCL_MEMBER(member, symbol, decl) decltype(&::decl) member = nullptr;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_MEMBER)
#undef KILN_NCCL_MEMBER

  std::string version() const {
    int code = 0;
    if (getVersion(&code) != ncclSuccess)
      return "unknown";
    // 2.9 and later: major * 10000 + minor * 100 + patch.
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
  }
  std::string describe(ncclResult_t rc) const {
    const char *text = getErrorString(rc);
    return text ? text : "ncclResult_t " + std::to_string(static_cast<int>(rc));
  }

private:
  NcclLibrary() = default;
  SharedLibrary library_;
};

Result<ncclDataType_t> ncclType(schema::DType dtype, const char *what) {
  switch (dtype) {
  case schema::DType::F32:
    return ncclFloat32;
  case schema::DType::F16:
    return ncclFloat16;
  case schema::DType::BF16:
    return ncclBfloat16;
  default:
    return invalidArgument(std::string("tensor-parallel ") + what +
                           ": buffers must be F32, F16 or BF16");
  }
}

size_t elementBytes(schema::DType dtype) {
  return dtype == schema::DType::F32 ? 4 : 2;
}

std::string joinOrdinals(const std::vector<int> &ordinals) {
  std::string joined;
  for (int ordinal : ordinals)
    joined += (joined.empty() ? "" : ", ") + std::to_string(ordinal);
  return joined;
}

} // namespace

struct NcclCommunicator::State {
  std::shared_ptr<const NcclLibrary> nccl;
  std::vector<Device *> devices;
  std::vector<int> ordinals;
  std::vector<CudaDevice::NativeHandles> handles;
  std::vector<ncclComm_t> comms;
  std::vector<uint8_t> aborted; // per rank; written by that rank's thread, or by reset()
  std::vector<DeviceMemory> gatherStaging;
  size_t gatherSlotBytes = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> calls; // collectives entered since reset, per rank
  std::chrono::milliseconds timeout{0};
  std::string description;
  mutable std::mutex mutex;
  Status failure;
  std::atomic<bool> failed{false};

  int size() const { return static_cast<int>(devices.size()); }
  std::string where(int rank) const {
    return "rank " + std::to_string(rank) + " (GPU " + std::to_string(ordinals[rank]) + ")";
  }

  // Keeps the first failure; returns the one kept.
  Status fail(const Status &status) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.isOk())
      failure = status;
    failed = true;
    return failure;
  }
  Status currentFailure() const {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
  void abortComm(int rank) {
    if (comms[rank] && !aborted[rank]) {
      handles[rank].driver->ctxSetCurrent(handles[rank].context);
      nccl->commAbort(comms[rank]);
    }
    aborted[rank] = 1;
  }
  // This rank's collective failed (or a partner's did): abort its communicator so its kernel
  // stops waiting, and report the first failure.
  Status failRank(int rank, const Status &status) {
    Status kept = fail(status);
    abortComm(rank);
    return kept;
  }

  Status initComms();
  void releaseComms(bool healthy);
  Status enter(int rank, schema::DType dtype, const char *what, ncclDataType_t &type);
  Status finish(int rank, ncclResult_t rc, const char *what);
  Status timedOut(int rank, const char *what) const;
};

// ncclCommInitAll's single-thread creation, with the non-blocking config it cannot take.
Status NcclCommunicator::State::initComms() {
  auto initFailed = [&](const std::string &call, ncclResult_t rc) {
    for (int r = 0; r < size(); ++r)
      if (comms[r]) {
        handles[r].driver->ctxSetCurrent(handles[r].context);
        nccl->commAbort(comms[r]);
        comms[r] = nullptr;
      }
    return unavailable("NCCL unavailable: " + call + " for GPUs " + joinOrdinals(ordinals) +
                       " failed: " + nccl->describe(rc));
  };
  ncclUniqueId id;
  if (ncclResult_t rc = nccl->getUniqueId(&id); rc != ncclSuccess)
    return initFailed("ncclGetUniqueId", rc);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  comms.assign(size(), nullptr);
  aborted.assign(size(), 0);
  nccl->groupStart();
  ncclResult_t firstError = ncclSuccess;
  for (int r = 0; r < size(); ++r) {
    // NCCL takes the rank's GPU from the current context, as cudaSetDevice would set it.
    handles[r].driver->ctxSetCurrent(handles[r].context);
    ncclResult_t rc = nccl->commInitRankConfig(&comms[r], size(), id, r, &config);
    if (rc != ncclSuccess && rc != ncclInProgress && firstError == ncclSuccess)
      firstError = rc;
  }
  ncclResult_t rc = nccl->groupEnd();
  if (firstError != ncclSuccess)
    return initFailed("ncclCommInitRankConfig", firstError);
  if (rc != ncclSuccess && rc != ncclInProgress)
    return initFailed("ncclGroupEnd", rc);
  const auto deadline = Clock::now() + timeout;
  for (int r = 0; r < size(); ++r) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      if (ncclResult_t q = nccl->commGetAsyncError(comms[r], &state); q != ncclSuccess)
        return initFailed("ncclCommGetAsyncError", q);
      if (state == ncclInProgress && Clock::now() > deadline)
        return initFailed("creating the communicators within " + std::to_string(timeout.count()) +
                              " ms",
                          ncclInProgress);
      if (state == ncclInProgress)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (state != ncclSuccess)
      return initFailed("ncclCommInitRankConfig", state);
  }
  return okStatus();
}

// Healthy communicators are finalized (flushing their work) and destroyed; failed ones aborted.
void NcclCommunicator::State::releaseComms(bool healthy) {
  if (healthy) {
    nccl->groupStart();
    for (int r = 0; r < size(); ++r)
      if (comms[r] && !aborted[r]) {
        handles[r].driver->ctxSetCurrent(handles[r].context);
        nccl->commFinalize(comms[r]);
      }
    nccl->groupEnd();
    const auto deadline = Clock::now() + timeout;
    for (int r = 0; r < size(); ++r) {
      ncclResult_t state = ncclInProgress;
      while (comms[r] && !aborted[r] && state == ncclInProgress && Clock::now() < deadline &&
             nccl->commGetAsyncError(comms[r], &state) == ncclSuccess)
        std::this_thread::yield();
      if (comms[r] && !aborted[r] && state == ncclSuccess) {
        handles[r].driver->ctxSetCurrent(handles[r].context);
        nccl->commDestroy(comms[r]);
        comms[r] = nullptr;
      }
    }
  }
  for (int r = 0; r < size(); ++r) {
    abortComm(r); // whatever is left: failed, or did not finalize in time
    comms[r] = nullptr;
  }
}

Status NcclCommunicator::State::enter(int rank, schema::DType dtype, const char *what,
                                      ncclDataType_t &type) {
  if (rank < 0 || rank >= size())
    return invalidArgument(std::string(what) + ": rank " + std::to_string(rank) +
                           " is not in [0, " + std::to_string(size()) + ")");
  if (failed)
    return currentFailure();
  Result<ncclDataType_t> mapped = ncclType(dtype, what);
  if (!mapped.isOk())
    return fail(mapped.status());
  type = *mapped;
  calls[rank].fetch_add(1);
  Status current = handles[rank].driver->check(
      handles[rank].driver->ctxSetCurrent(handles[rank].context), "cuCtxSetCurrent");
  return current.isOk() ? current : fail(current.withContext(where(rank)));
}

Status NcclCommunicator::State::timedOut(int rank, const char *what) const {
  std::string missing;
  const uint64_t mine = calls[rank].load();
  for (int r = 0; r < size(); ++r)
    if (calls[r].load() < mine)
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  std::string prefix = "tensor-parallel " + std::string(what) + ": rank " + std::to_string(rank) +
                       " waited " + std::to_string(timeout.count()) + " ms ";
  if (missing.empty())
    return unavailable(prefix + "for NCCL on GPU " + std::to_string(ordinals[rank]) +
                       " to finish (every rank arrived)");
  return unavailable(prefix + "for rank(s) " + missing + ", which failed or stalled");
}

// Waits for the enqueued collective (non-blocking NCCL may still be enqueuing it) and then for
// the stream, polling so that a partner's abort or the timeout ends the wait.
Status NcclCommunicator::State::finish(int rank, ncclResult_t rc, const char *what) {
  const CudaDriver &driver = *handles[rank].driver;
  auto error = [&](const std::string &call, const std::string &detail) {
    return failRank(rank, internalError("tensor-parallel " + std::string(what) + " on " +
                                        where(rank) + ": " + call + " failed: " + detail));
  };
  if (rc != ncclSuccess && rc != ncclInProgress)
    return error(std::string("nccl ") + what, nccl->describe(rc));
  const auto deadline = Clock::now() + timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t q = nccl->commGetAsyncError(comms[rank], &state); q != ncclSuccess)
      return error("ncclCommGetAsyncError", nccl->describe(q));
    if (state != ncclSuccess && state != ncclInProgress)
      return error(std::string("nccl ") + what, nccl->describe(state));
    if (state == ncclSuccess) {
      CUresult query = driver.streamQuery(handles[rank].stream);
      if (query == CUDA_SUCCESS)
        return okStatus();
      if (query != CUDA_ERROR_NOT_READY)
        return error("cuStreamQuery", driver.describe(query));
    }
    if (failed)
      return failRank(rank, okStatus()); // a partner failed: its reason is the step's error
    if (Clock::now() > deadline)
      return failRank(rank, timedOut(rank, what));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() {
  state_->releaseComms(!state_->failed);
  for (int r = 0; r < state_->size(); ++r)
    state_->devices[r]->free(state_->gatherStaging[r]);
}

Result<std::string> probeNccl(const std::string &library) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const NcclLibrary> nccl, NcclLibrary::load(library));
  return nccl->version();
}

Result<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const std::vector<Device *> &devices, const std::vector<int> &ordinals,
                         const CollectiveSizes &sizes, const NcclOptions &options) {
  if (devices.empty() || devices.size() != ordinals.size())
    return invalidArgument("NCCL unavailable: " + std::to_string(devices.size()) + " devices but " +
                           std::to_string(ordinals.size()) + " ordinals");
  auto state = std::make_unique<State>();
  for (size_t r = 0; r < devices.size(); ++r) {
    auto *cuda = dynamic_cast<CudaDevice *>(devices[r]);
    if (!cuda)
      return unavailable("NCCL unavailable: rank " + std::to_string(r) + " is on device '" +
                         (devices[r] ? devices[r]->name() : "none") + "', not a CUDA GPU");
    for (size_t s = 0; s < r; ++s)
      if (ordinals[s] == ordinals[r])
        return unavailable("NCCL unavailable: ranks " + std::to_string(s) + " and " +
                           std::to_string(r) + " share GPU " + std::to_string(ordinals[r]) +
                           " (NCCL needs one GPU per rank)");
    state->handles.push_back(cuda->nativeHandles());
  }
  KILN_ASSIGN_OR_RETURN(state->nccl, NcclLibrary::load(options.library));
  state->devices = devices;
  state->ordinals = ordinals;
  state->timeout = options.timeout;
  state->calls = std::make_unique<std::atomic<uint64_t>[]>(devices.size());
  state->gatherSlotBytes = sizes.maxInputBytes;
  state->description = "NCCL " + state->nccl->version() + " over GPUs " + joinOrdinals(ordinals);
  // Owned by the communicator from here on, so its destructor frees what was allocated.
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(state)));
  State &s = *comm->state_;
  s.gatherStaging.resize(devices.size());
  s.comms.assign(devices.size(), nullptr);
  s.aborted.assign(devices.size(), 0);
  for (size_t r = 0; r < devices.size(); ++r) {
    Result<DeviceMemory> staging =
        devices[r]->allocate(devices.size() * s.gatherSlotBytes, MemoryKind::kDevice);
    if (!staging.isOk())
      return staging.status().withContext("NCCL unavailable: all_gather staging on " +
                                          s.where(static_cast<int>(r)));
    s.gatherStaging[r] = *staging;
  }
  KILN_RETURN_IF_ERROR(s.initComms());
  return comm;
}

int NcclCommunicator::worldSize() const {
  return state_->size();
}

Status NcclCommunicator::allReduceSum(int rank, const void *in, void *out, size_t count,
                                      schema::DType dtype) {
  State &s = *state_;
  ncclDataType_t type;
  KILN_RETURN_IF_ERROR(s.enter(rank, dtype, "all_reduce", type));
  ncclResult_t rc =
      s.nccl->allReduce(in, out, count, type, ncclSum, s.comms[rank], s.handles[rank].stream);
  return s.finish(rank, rc, "all_reduce");
}

Status NcclCommunicator::allGatherColumns(int rank, const void *in, void *out, size_t rows,
                                          size_t inWidth, size_t outWidth, schema::DType dtype) {
  State &s = *state_;
  ncclDataType_t type;
  KILN_RETURN_IF_ERROR(s.enter(rank, dtype, "all_gather", type));
  const size_t elem = elementBytes(dtype), shardBytes = rows * inWidth * elem;
  if (shardBytes > s.gatherSlotBytes || outWidth > inWidth * s.size())
    return s.failRank(
        rank, invalidArgument("tensor-parallel all_gather on " + s.where(rank) + ": " +
                              std::to_string(rows) + "x" + std::to_string(inWidth) + " -> " +
                              std::to_string(outWidth) + " columns exceeds the staging of " +
                              std::to_string(s.gatherSlotBytes) + " bytes per rank"));
  auto *staging = static_cast<uint8_t *>(s.gatherStaging[rank].data);
  ncclResult_t rc =
      s.nccl->allGather(in, staging, rows * inWidth, type, s.comms[rank], s.handles[rank].stream);
  KILN_RETURN_IF_ERROR(s.finish(rank, rc, "all_gather"));
  // NCCL leaves the shards rank after rank; the plan wants them side by side in each row,
  // without the padding columns past outWidth.
  const CudaDriver &driver = *s.handles[rank].driver;
  for (int r = 0; r < s.size() && rows > 0; ++r) {
    size_t column = inWidth * r;
    if (column >= outWidth)
      break;
    CUDA_MEMCPY2D copy = {};
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = reinterpret_cast<CUdeviceptr>(staging + r * shardBytes);
    copy.srcPitch = inWidth * elem;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = reinterpret_cast<CUdeviceptr>(static_cast<uint8_t *>(out) + column * elem);
    copy.dstPitch = outWidth * elem;
    copy.WidthInBytes = std::min(inWidth, outWidth - column) * elem;
    copy.Height = rows;
    Status copied = driver.check(driver.memcpy2DAsync(&copy, s.handles[rank].stream),
                                 "cuMemcpy2DAsync(all_gather shard " + std::to_string(r) + ")");
    if (!copied.isOk())
      return s.failRank(rank, copied.withContext(s.where(rank)));
  }
  return okStatus();
}

void NcclCommunicator::abort(int rank, const Status &reason) {
  // The aborting rank is not inside a call; its communicator is rebuilt by reset().
  (void)state_->fail(reason.isOk() ? cancelled("rank " + std::to_string(rank) + " aborted")
                                   : reason);
}

Status NcclCommunicator::failure() const {
  return state_->currentFailure();
}

void NcclCommunicator::reset() {
  State &s = *state_;
  for (int r = 0; r < s.size(); ++r)
    s.calls[r] = 0;
  if (!s.failed)
    return;
  // An aborted NCCL communicator cannot be used again: rebuild the whole clique.
  s.releaseComms(/*healthy=*/false);
  Status rebuilt = s.initComms();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failure = rebuilt;
  s.failed = !rebuilt.isOk();
}

const std::string &NcclCommunicator::description() const {
  return state_->description;
}

#endif // KILN_HAVE_CUDA_BACKEND

} // namespace kiln::rt
