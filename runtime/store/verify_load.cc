#include "runtime/store/verify_load.h"

#include "runtime/exec/executor.h"
#include "runtime/exec/multi_rank_runner.h"

#include <algorithm>

namespace kiln::rt {

Result<VerifyLoaded> loadForVerify(const std::string &dir, const std::string &deviceName,
                                   const std::vector<int> &devices, int32_t longest) {
  VerifyLoaded loaded;
  KILN_ASSIGN_OR_RETURN(loaded.artifact, Artifact::load(dir));
  const schema::CompiledLimits &limits = *loaded.artifact->plan().limits();
  if (longest > limits.max_seq_len())
    return outOfRange("a verify case has " + std::to_string(longest) +
                      " tokens; the artifact's compiled max_seq_len is " +
                      std::to_string(limits.max_seq_len()) + " (recompile with --max-seq-len)");
  RankPlacementRequest request;
  request.artifactDir = dir;
  request.tp = static_cast<int>(loaded.artifact->plan().tp());
  request.device = deviceName;
  request.devices = devices;
  KILN_ASSIGN_OR_RETURN(DeviceName name, parseDeviceName(deviceName));
  if (name.kind == DeviceKind::kCuda)
    request.visible = countCudaDevices();
  KILN_ASSIGN_OR_RETURN(RankPlacement placement, placeRanks(request));
  int32_t blockSize = int32_t(loaded.artifact->plan().kv_cache()->block_size());
  ExecutorOptions options;
  // One sequence at a time, with blocks of its own in every KV cache group (ownBlockTables).
  const auto *groups = loaded.artifact->plan().kv_cache()->groups();
  const int32_t numGroups = groups && groups->size() > 0 ? int32_t(groups->size()) : 1;
  options.numKvBlocks = std::max(1, (longest + blockSize - 1) / blockSize) * numGroups;
  if (request.tp == 1) {
    KILN_ASSIGN_OR_RETURN(loaded.device, createDevice(placement.deviceName(0)));
    KILN_ASSIGN_OR_RETURN(loaded.runner,
                          Executor::create(*loaded.artifact, *loaded.device, options));
    return loaded;
  }
  MultiRankOptions multiRank;
  multiRank.device = placement.kind == DeviceKind::kCpu ? "cpu" : "cuda";
  multiRank.devices = placement.ordinals;
  multiRank.executor = options;
  KILN_ASSIGN_OR_RETURN(loaded.runner, MultiRankRunner::create(*loaded.artifact, multiRank));
  return loaded;
}

} // namespace kiln::rt
