#include "tools/kiln/loaded_model.h"

#include <algorithm>

namespace kiln::tools {

Result<LoadedModel> loadModel(const std::string &dir, const std::string &deviceName,
                              int64_t kvTokens) {
  LoadedModel model;
  KILN_ASSIGN_OR_RETURN(model.artifact, rt::Artifact::load(dir));
  KILN_ASSIGN_OR_RETURN(model.device, rt::createDevice(deviceName));
  rt::ExecutorOptions options;
  const schema::Plan &plan = model.artifact->plan();
  int64_t blockSize = plan.kv_cache()->block_size();
  // More than every sequence at its longest can never be used.
  kvTokens = std::min<int64_t>(kvTokens, static_cast<int64_t>(plan.limits()->max_seq_len()) *
                                             plan.limits()->max_batch());
  options.numKvBlocks = static_cast<int32_t>((kvTokens + blockSize - 1) / blockSize);
  KILN_ASSIGN_OR_RETURN(model.executor,
                        rt::Executor::create(*model.artifact, *model.device, options));
  return model;
}

} // namespace kiln::tools
