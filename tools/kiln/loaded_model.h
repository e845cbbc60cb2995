// An artifact loaded onto a device with an executor: what generate, verify and bench share.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/device.h"

#include <memory>
#include <string>

namespace kiln::tools {

struct LoadedModel {
  std::unique_ptr<rt::Artifact> artifact;
  std::unique_ptr<rt::Device> device;
  std::unique_ptr<rt::Executor> executor;
};

// Loads `dir` (verifying plan and weights), creates `deviceName` and an executor whose KV pool
// holds `kvTokens` tokens (rounded up to whole blocks); 0 keeps the executor's default pool.
Result<LoadedModel> loadModel(const std::string &dir, const std::string &deviceName,
                              int64_t kvTokens);

} // namespace kiln::tools
