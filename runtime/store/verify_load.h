// The artifact and runner `kiln verify` checks (runtime/store/verify.h, embed_verify.h): one
// executor for tp 1, every rank (MultiRankRunner) otherwise, placed by --device / --devices, with
// KV blocks for one sequence of `longest` tokens in every KV cache group.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/step.h"
#include "runtime/hal/device.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

struct VerifyLoaded {
  std::unique_ptr<Artifact> artifact;
  std::unique_ptr<Device> device; // tp 1
  std::unique_ptr<ModelRunner> runner;
};

// An error when `longest` exceeds the artifact's compiled max_seq_len (naming both).
Result<VerifyLoaded> loadForVerify(const std::string &dir, const std::string &deviceName,
                                   const std::vector<int> &devices, int32_t longest);

} // namespace kiln::rt
