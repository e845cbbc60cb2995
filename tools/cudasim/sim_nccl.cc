// cudasim's NCCL (libnccl.so.2 beside the simulated libcuda.so.1): the calls kiln's
// NcclCommunicator makes, for ranks that are threads of one process on simulated GPUs. The real
// libnccl.so.2 cannot initialize on simulated GPUs; this one lets the NCCL path run end to end
// in CI, with the checks that catch a caller's mistakes:
//
// - Communicators: a clique per unique id (ncclGetUniqueId); ncclCommInitRankConfig joins the
//   rank on the current context's device and reports ncclInProgress from ncclCommGetAsyncError
//   until every rank joined. A rank joined twice, two ranks on one GPU ("Duplicate GPU
//   detected", as NCCL says), a config without NCCL_CONFIG_INITIALIZER, and blocking
//   communicators (kiln creates non-blocking ones, so it can bound every wait) are refused.
// - Collectives (ncclAllReduce with ncclSum, ncclAllGather; F32, F16, BF16): the stream must be a
//   live stream of the communicator's device and not capturing; every buffer must lie in one live
//   device allocation of that device (sim_hooks.h asks the simulated driver). The call is
//   recorded; the last rank to call collective number k performs it for all ranks (all-reduce:
//   an fp32 sum in rank order, rounded once, what the cpu communicator computes; all-gather:
//   rank r's input at offset r * count), so a rank's output is written only once every partner
//   called. Until then ncclCommGetAsyncError reports ncclInProgress for the rank (the stream
//   itself is always idle, streams being synchronous in the simulator). Ranks calling collective k
//   with different kinds, counts, types or operations get ncclInvalidUsage on every communicator
//   (NCCL would hang or corrupt memory).
// - Failure: ncclCommAbort frees the communicator and breaks its clique: collectives that still
//   wait for the aborted rank, and later ones, never complete, as partners of a dead rank spin on
//   a GPU until their own abort. ncclCommFinalize then ncclCommDestroy is the clean way out.
//
// Not simulated: collectives inside a stream capture, groups of collectives, other operations
// and types, the network. A test tool: never installed, never shipped.
#include "runtime/base/half.h"
#include "tools/cudasim/sim_hooks.h"

#include <cuda.h>
#include <nccl.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#define KILN_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

struct ncclComm {
  uint64_t clique = 0;
  int rank = 0;
  int device = 0;
  bool finalized = false;
  uint64_t issued = 0; // collectives this rank has called
  ncclResult_t error = ncclSuccess;
};

namespace {

constexpr char kIdMagic[] = "kiln-cudasim-nccl";

enum class Kind { kAllReduce, kAllGather };

struct Call {
  Kind kind = Kind::kAllReduce;
  const void *send = nullptr;
  void *recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
};

struct Clique {
  int nranks = 0;
  std::vector<ncclComm *> members; // by rank; null until joined and after destroy/abort
  int joined = 0;
  bool broken = false;    // a member aborted: nothing completes any more
  uint64_t completed = 0; // collectives performed, in order
  std::map<uint64_t, std::vector<std::optional<Call>>> open; // by collective number
};

struct Sim {
  std::mutex mutex;
  uint64_t nextId = 1;
  std::map<uint64_t, Clique> cliques;
  std::set<ncclComm *> live;
};

Sim &sim() {
  static Sim *s = new Sim(); // never destroyed: threads may call during exit
  return *s;
}

thread_local int groupDepth = 0;

// The hooks of the simulated driver, which the process loaded before any NCCL call can come.
template <typename Fn> Fn driverHook(const char *name) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  return driver ? reinterpret_cast<Fn>(dlsym(driver, name)) : nullptr;
}

ncclResult_t refuse(ncclResult_t code, const std::string &what) {
  std::fprintf(stderr, "cudasim nccl: %s\n", what.c_str());
  return code;
}

size_t elementBytes(ncclDataType_t type) {
  return type == ncclFloat32 ? 4 : 2;
}

float load(const void *p, size_t i, ncclDataType_t type) {
  if (type == ncclFloat32) {
    float v;
    std::memcpy(&v, static_cast<const uint8_t *>(p) + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t *>(p) + 2 * i, 2);
  return type == ncclBfloat16 ? kiln::bf16ToF32(h) : kiln::f16ToF32(h);
}

void store(void *p, size_t i, float v, ncclDataType_t type) {
  if (type == ncclFloat32) {
    std::memcpy(static_cast<uint8_t *>(p) + 4 * i, &v, 4);
    return;
  }
  uint16_t h = type == ncclBfloat16 ? kiln::f32ToBf16(v) : kiln::f32ToF16(v);
  std::memcpy(static_cast<uint8_t *>(p) + 2 * i, &h, 2);
}

std::string describe(const Call &call) {
  return std::string(call.kind == Kind::kAllReduce ? "ncclAllReduce" : "ncclAllGather") +
         "(count " + std::to_string(call.count) + ", type " + std::to_string(call.type) + ", op " +
         std::to_string(call.op) + ")";
}

// With the mutex held: every rank called collective `seq`; performs it for all of them.
void perform(Clique &clique, uint64_t seq) {
  std::vector<std::optional<Call>> calls = std::move(clique.open[seq]);
  clique.open.erase(seq);
  const Call &first = *calls[0];
  for (int r = 1; r < clique.nranks; ++r) {
    const Call &c = *calls[r];
    if (c.kind != first.kind || c.count != first.count || c.type != first.type ||
        c.op != first.op) {
      std::string what = "collective " + std::to_string(seq) + ": rank 0 called " +
                         describe(first) + " but rank " + std::to_string(r) + " called " +
                         describe(c);
      refuse(ncclInvalidUsage, what);
      for (ncclComm *member : clique.members)
        if (member)
          member->error = ncclInvalidUsage;
      ++clique.completed;
      return;
    }
  }
  const size_t n = first.count, bytes = elementBytes(first.type);
  if (first.kind == Kind::kAllReduce) {
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < clique.nranks; ++r)
      for (size_t i = 0; i < n; ++i)
        sum[i] += load(calls[r]->send, i, first.type);
    for (int r = 0; r < clique.nranks; ++r)
      for (size_t i = 0; i < n; ++i)
        store(calls[r]->recv, i, sum[i], first.type);
  } else {
    // Every input first: a rank's input may sit inside its own output (in place).
    std::vector<uint8_t> gathered(n * bytes * clique.nranks);
    for (int r = 0; r < clique.nranks; ++r)
      std::memcpy(gathered.data() + r * n * bytes, calls[r]->send, n * bytes);
    for (int r = 0; r < clique.nranks; ++r)
      std::memcpy(calls[r]->recv, gathered.data(), gathered.size());
  }
  ++clique.completed;
}

// With the mutex held: what ncclCommGetAsyncError reports.
ncclResult_t state(const ncclComm &comm) {
  if (comm.error != ncclSuccess)
    return comm.error;
  const Clique &clique = sim().cliques.at(comm.clique);
  if (clique.joined < clique.nranks || comm.issued > clique.completed)
    return ncclInProgress;
  return ncclSuccess;
}

// With the lock held: whether `comm` is a communicator this library made and has not freed.
bool isLive(ncclComm *comm) {
  return comm && sim().live.count(comm);
}

// ncclCommDestroy / ncclCommAbort: frees the communicator; an abort breaks its clique.
ncclResult_t forget(ncclComm *comm, bool aborted, const char *api) {
  Sim &s = sim();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!comm)
    return ncclSuccess;
  if (!isLive(comm))
    return refuse(ncclInvalidArgument, std::string(api) + ": not a live communicator");
  Clique &clique = s.cliques.at(comm->clique);
  clique.members[comm->rank] = nullptr;
  clique.broken = clique.broken || aborted;
  s.live.erase(comm);
  bool anyLeft = false;
  for (ncclComm *member : clique.members)
    anyLeft = anyLeft || member;
  if (!anyLeft)
    s.cliques.erase(comm->clique);
  delete comm;
  return ncclSuccess;
}

// Checks a collective's stream and buffers against the communicator's device.
ncclResult_t checkOperands(ncclComm *comm, const char *api, cudaStream_t stream, const void *send,
                           size_t sendBytes, const void *recv, size_t recvBytes) {
  using StreamDevice = int (*)(CUstream, int *, char *, size_t);
  using RangeDevice = int (*)(const void *, size_t, char *, size_t);
  static auto streamDevice = driverHook<StreamDevice>(kKilnCudasimStreamDevice);
  static auto rangeDevice = driverHook<RangeDevice>(kKilnCudasimRangeDevice);
  const std::string where = std::string(api) + " on rank " + std::to_string(comm->rank) +
                            " (device " + std::to_string(comm->device) + "): ";
  if (!streamDevice || !rangeDevice)
    return refuse(ncclSystemError, where + "the simulated libcuda.so.1 is not loaded");
  char why[256] = "";
  int capturing = 0;
  int device = streamDevice(reinterpret_cast<CUstream>(stream), &capturing, why, sizeof why);
  if (device != comm->device)
    return refuse(
        ncclInvalidArgument,
        where + "the stream " +
            (device < 0 ? std::string(why) : "belongs to device " + std::to_string(device)));
  if (capturing)
    return refuse(ncclInvalidUsage, where + "the stream is being captured (not simulated)");
  using Operand = std::tuple<const char *, const void *, size_t>;
  for (auto [role, p, bytes] :
       {Operand{"send", send, sendBytes}, Operand{"recv", recv, recvBytes}}) {
    device = rangeDevice(p, bytes, why, sizeof why);
    if (device != comm->device)
      return refuse(ncclInvalidArgument,
                    where + role + " buffer " +
                        (device < 0 ? std::string(why) : "is on device " + std::to_string(device)));
  }
  return ncclSuccess;
}

ncclResult_t collective(Call call, ncclComm *comm, cudaStream_t stream, const char *api) {
  Sim &s = sim();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!isLive(comm))
    return refuse(ncclInvalidArgument, std::string(api) + ": not a live communicator");
  if (comm->error != ncclSuccess)
    return comm->error;
  if (comm->finalized)
    return refuse(ncclInvalidUsage, std::string(api) + ": the communicator is finalized");
  if (call.type != ncclFloat32 && call.type != ncclFloat16 && call.type != ncclBfloat16)
    return refuse(ncclInvalidArgument,
                  std::string(api) + ": type " + std::to_string(call.type) + " is not simulated");
  if (call.op != ncclSum)
    return refuse(ncclInvalidArgument,
                  std::string(api) + ": op " + std::to_string(call.op) + " is not simulated");
  Clique &clique = s.cliques.at(comm->clique);
  const size_t sendBytes = call.count * elementBytes(call.type);
  const size_t recvBytes = call.kind == Kind::kAllGather ? sendBytes * clique.nranks : sendBytes;
  if (ncclResult_t rc =
          checkOperands(comm, api, stream, call.send, sendBytes, call.recv, recvBytes))
    return rc;
  const uint64_t seq = comm->issued++;
  std::vector<std::optional<Call>> &calls = clique.open[seq];
  calls.resize(clique.nranks);
  calls[comm->rank] = call;
  bool everyone = true;
  for (const std::optional<Call> &c : calls)
    everyone = everyone && c.has_value();
  // Every rank that called k called k - 1 first, so k - 1 is done unless the clique broke.
  if (everyone && !clique.broken)
    perform(clique, seq);
  return ncclSuccess;
}

} // namespace

KILN_NCCL_EXPORT ncclResult_t ncclGetVersion(int *version) {
  if (!version)
    return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

KILN_NCCL_EXPORT const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError:
    return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError:
    return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument:
    return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage:
    return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

KILN_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(sim().mutex);
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  uint64_t next = sim().nextId++;
  std::memcpy(id->internal + sizeof kIdMagic, &next, sizeof next);
  return ncclSuccess;
}

KILN_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *newcomm, int nranks,
                                                     ncclUniqueId id, int rank,
                                                     ncclConfig_t *config) {
  using CurrentDevice = int (*)(char *, size_t);
  static auto currentDevice = driverHook<CurrentDevice>(kKilnCudasimCurrentDevice);
  const std::string api = "ncclCommInitRankConfig(rank " + std::to_string(rank) + ")";
  if (!newcomm || nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument, api + ": null comm or rank outside [0, nranks)");
  *newcomm = nullptr;
  uint64_t key = 0;
  std::memcpy(&key, id.internal + sizeof kIdMagic, sizeof key);
  if (std::memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0 || key == 0)
    return refuse(ncclInvalidArgument, api + ": the id is not from ncclGetUniqueId");
  if (!config || config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef)
    return refuse(ncclInvalidArgument, api + ": no config set from NCCL_CONFIG_INITIALIZER");
  if (config->blocking != 0) // NCCL_CONFIG_UNDEF_INT means blocking
    return refuse(ncclInvalidArgument,
                  api + ": a blocking communicator (not simulated; set config.blocking = 0)");
  char why[256] = "";
  int device = currentDevice ? currentDevice(why, sizeof why) : -1;
  if (device < 0)
    return refuse(ncclInvalidUsage,
                  api + ": " + (currentDevice ? why : "the simulated libcuda.so.1 is not loaded"));
  Sim &s = sim();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (key >= s.nextId)
    return refuse(ncclInvalidArgument, api + ": the id is not from ncclGetUniqueId");
  Clique &clique = s.cliques[key];
  if (clique.nranks == 0) {
    clique.nranks = nranks;
    clique.members.assign(nranks, nullptr);
  }
  if (clique.nranks != nranks)
    return refuse(ncclInvalidArgument, api + ": nranks " + std::to_string(nranks) +
                                           " but the clique has " + std::to_string(clique.nranks));
  if (clique.members[rank])
    return refuse(ncclInvalidUsage, api + ": the rank joined already");
  for (int r = 0; r < nranks; ++r)
    if (clique.members[r] && clique.members[r]->device == device)
      return refuse(ncclInvalidUsage, api + ": Duplicate GPU detected : rank " + std::to_string(r) +
                                          " and rank " + std::to_string(rank) +
                                          " both on CUDA device " + std::to_string(device));
  auto *comm = new ncclComm();
  comm->clique = key;
  comm->rank = rank;
  comm->device = device;
  clique.members[rank] = comm;
  ++clique.joined;
  s.live.insert(comm);
  *newcomm = comm;
  return groupDepth > 0 || state(*comm) == ncclSuccess ? ncclSuccess : ncclInProgress;
}

KILN_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

KILN_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --groupDepth;
  return ncclSuccess;
}

KILN_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  std::lock_guard<std::mutex> lock(sim().mutex);
  if (!isLive(comm) || !asyncError)
    return refuse(ncclInvalidArgument,
                  "ncclCommGetAsyncError: not a live communicator, or a null result pointer");
  *asyncError = state(*comm);
  return ncclSuccess;
}

KILN_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(sim().mutex);
  if (!isLive(comm))
    return refuse(ncclInvalidArgument, "ncclCommFinalize: not a live communicator");
  comm->finalized = true;
  return ncclSuccess;
}

KILN_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return forget(comm, /*aborted=*/false, "ncclCommDestroy");
}

KILN_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return forget(comm, /*aborted=*/true, "ncclCommAbort");
}

KILN_NCCL_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream) {
  return collective(Call{Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op}, comm, stream,
                    "ncclAllReduce");
}

KILN_NCCL_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                            ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream) {
  return collective(Call{Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum}, comm,
                    stream, "ncclAllGather");
}
