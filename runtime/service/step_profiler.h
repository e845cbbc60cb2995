// `kiln profile`: one engine step of a loaded artifact timed op by op, with what each op must
// move and compute (op_cost.h), so a benchmark that misses the hardware limit says which ops
// miss it. The step is synthetic: `batch` sequences of random token ids, either decoding one token
// at position context - 1 (the cache before it filled by real prefill steps first) or prefilling
// `prefill` tokens each from position 0.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/op_cost.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::rt {

struct ProfileRequest {
  int32_t batch = 1;
  int32_t context = 128; // decode: cache positions after the step; ignored for prefill
  int32_t prefill = 0;   // > 0: a prefill step of this many tokens per sequence
  int repeats = 10;
  uint64_t seed = 0;
  // Progress lines while the cache fills (may be empty).
  std::function<void(const std::string &)> progress;
};

struct OpProfile {
  std::string name;  // the plan's op name ("layers.3.attn.qkv")
  std::string kind;  // "Linear", "Attention", ...
  std::string group; // the name without its layer ("layers.*.attn.qkv")
  std::string impl;  // how the device runs it, when it has a choice ("gemv 1/warp", "cublasLt 2/8")
  double micros = 0; // median, op by op
  OpCost cost;
};

struct ProfileReport {
  std::string mode; // "decode" or "prefill"
  int32_t batch = 0;
  int32_t context = 0;   // cache positions per sequence after the step
  int32_t newTokens = 0; // per sequence
  int repeats = 0;
  StepProfile step;
  // The profiled step and, per sequence, every token id it holds (the cache's and the step's).
  StepBatch stepBatch;
  std::vector<std::vector<int32_t>> sequenceIds;
  std::vector<OpProfile> ops;
  OpCost total;
  // The step's time for the fractions: the graph replay when there is one, else op by op.
  double stepMicros() const { return step.graphMicros > 0 ? step.graphMicros : step.eagerMicros; }
};

// The ceilings fractions are taken of: tools/bench/roofline's JSON (hbm_bytes_per_s,
// bf16_flops_per_s), 0 where unknown.
struct Ceilings {
  double hbmBytesPerS = 0;
  double flopsPerS = 0;
  std::string deviceName;
};
Result<Ceilings> readRooflineJson(const std::string &path);

// Checks the request against the executor's limits (errors name the flag and the limit), fills
// the cache for a decode step, then profiles the step.
Result<ProfileReport> profileStep(Executor &executor, const schema::KvCacheSpec &kv,
                                  const ProfileRequest &request);

// "layers.12.mlp.down" -> "layers.*.mlp.down"; names without a layer index are kept.
std::string opGroupName(const std::string &name);

nlohmann::ordered_json profileJson(const ProfileReport &report, const Ceilings &ceilings);
// Per op group (time, share of the step, GB/s, TFLOP/s, fractions of the ceilings), the `topOps`
// slowest ops, and the step totals.
std::string profileTable(const ProfileReport &report, const Ceilings &ceilings, size_t topOps);

} // namespace kiln::rt
