// Runs one engine step of a loaded artifact's plan on a Device (DESIGN.md "The step program").
// Everything is allocated at create (weights, activation arena, paged KV cache, step inputs at
// the compiled maxima) and the program is resolved into prepared ops, so execute() allocates
// only the logits it returns and dispatches each op with one indirect call.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/exec/step.h"
#include "runtime/exec/step_inputs.h"
#include "runtime/hal/device.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::rt {

class Communicator;

struct ExecutorOptions {
  int rank = 0;                           // which rank of the plan this executor runs
  int32_t numKvBlocks = 0;                // 0: derive from kvCacheBytes
  size_t kvCacheBytes = size_t(64) << 20; // K and V of every layer, all blocks together
  // In (0, 1]: after weights, arena and step inputs are allocated, the KV cache takes what keeps
  // the device's used memory at or below this fraction of its total (--gpu-memory-utilization);
  // numKvBlocks and kvCacheBytes are then ignored. 0: size from numKvBlocks / kvCacheBytes.
  double memoryUtilization = 0.0;
  // Runs the plan's AllReduce/AllGather ops with the other ranks; required when the plan's tp > 1
  // (MultiRankRunner sets it), must outlive the executor.
  Communicator *communicator = nullptr;
};

class Executor final : public ModelRunner {
public:
  // `artifact` and `device` must outlive the executor (it binds plan tables and mapped weights).
  static Result<std::unique_ptr<Executor>> create(const Artifact &artifact, Device &device,
                                                  const ExecutorOptions &options = {});
  ~Executor() override;
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const RunnerLimits &limits() const override { return limits_; }
  Result<StepOutput> execute(const StepBatch &batch) override;

  // Bytes of one KV block over all layers, K and V (what numKvBlocks is derived from).
  size_t kvBlockBytes() const { return kvBlockBytes_; }

private:
  struct StepInputBuffer {
    schema::StepInputKind kind;
    void *data;
  };
  // A device op, or a collective (AllReduce/AllGather) that the communicator runs.
  struct ProgramStep {
    std::unique_ptr<PreparedOp> prepared;
    schema::OpParams collective = schema::OpParams::NONE;
    BoundBuffer in, out;
  };

  Executor(const Artifact &artifact, Device &device, int rank);
  Status allocate(const ExecutorOptions &options);
  Status bindProgram();
  Status runCollective(const ProgramStep &step, const StepCounts &counts);
  Result<DeviceMemory> track(Result<DeviceMemory> memory);

  const Artifact &artifact_;
  Device &device_;
  const schema::Rank &rank_;
  RunnerLimits limits_;
  size_t kvBlockBytes_ = 0;
  std::vector<DeviceMemory> memory_; // everything allocated or imported, freed in ~Executor
  void *weights_ = nullptr;
  void *arena_ = nullptr;
  KvCacheBinding kvCache_;
  std::vector<BoundBuffer> buffers_; // by plan buffer index
  std::vector<StepInputBuffer> stepInputs_;
  std::vector<ProgramStep> program_;
  Communicator *communicator_ = nullptr;
  const void *logits_ = nullptr;
  HostStepInputs hostInputs_;
};

} // namespace kiln::rt
