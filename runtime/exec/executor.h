// Runs one engine step of a loaded artifact's plan on a Device (docs/design.md "The step program").
// Everything is allocated at create (weights, activation arena, step inputs at the compiled
// maxima, then the paged KV cache, last so it can take what memory is left) and the program is
// resolved into prepared ops, so execute() allocates only the logits it returns and dispatches
// each op with one indirect call, or replays one captured graph for a padded decode step.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/artifact/kv_layout.h"
#include "runtime/exec/step.h"
#include "runtime/exec/step_inputs.h"
#include "runtime/hal/device.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt {

class Communicator;

// Decode-only steps (every sequence has one new token) padded to a batch-size bucket (1, 2, 4,
// ..., max batch) and captured as one device graph per bucket (docs/design.md "The step program").
enum class DecodeBuckets : uint8_t {
  kAuto,    // pad and capture on devices that support graphs, for plans with tp 1 (collectives
            // run on the host between ops, so a tp > 1 step cannot be one graph); else neither
  kOff,     // every step runs as it is, op by op
  kPadOnly, // pad decode steps but never capture: checks the padding on any device (tests)
};

struct ExecutorOptions {
  int rank = 0;                           // which rank of the plan this executor runs
  int32_t numKvBlocks = 0;                // 0: derive from kvCacheBytes
  size_t kvCacheBytes = size_t(64) << 20; // K and V of every layer, all blocks together
  // In (0, 1]: once weights, arena, step inputs and what the prepared ops allocate (cuBLASLt
  // workspace, op scratch) are in place, the KV cache takes what keeps the device's used
  // memory (Device::memoryInfo) at or below this fraction of its total
  // (--gpu-memory-utilization); numKvBlocks and kvCacheBytes are then ignored. An error names the
  // flag and the bytes when not one block fits. 0: size from numKvBlocks / kvCacheBytes.
  double memoryUtilization = 0.0;
  // Runs the plan's AllReduce/AllGather ops with the other ranks; required when the plan's tp > 1
  // (MultiRankRunner sets it), must outlive the executor.
  Communicator *communicator = nullptr;
  DecodeBuckets decodeBuckets = DecodeBuckets::kAuto;
  // Told once per bucket whose graph capture failed (it then runs uncaptured); may be empty.
  std::function<void(const std::string &)> log;
};

// One step timed op by op (Executor::profile). Times in microseconds, medians over the repeats,
// from the device's clock (CUDA events on a GPU).
struct StepProfile {
  StepCounts counts;                // the step as run op by op (never padded)
  std::vector<double> opMicros;     // per op of the rank's program, in program order
  std::vector<std::string> opImpls; // per op: Device::describeOp ("" for collectives)
  double eagerMicros = 0;           // the whole step op by op
  // A decode step on a device with graphs: the step padded to its batch bucket and replayed as
  // its captured graph. 0 when the step runs without a graph.
  double graphMicros = 0;
  int32_t graphBatch = 0; // the bucket (padded batch size) of graphMicros
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

  // Bytes of one KV block, K and V of one layer per storage slot (plan.fbs "KV cache groups";
  // every layer without groups): what numKvBlocks is derived from.
  size_t kvBlockBytes() const { return kvBlockBytes_; }
  // The KV cache as the ops see it (device memory: host memory on the cpu) and each layer's group
  // and slot: for tools that read it back (runtime/exec/kv_calibration.h).
  const KvCacheBinding &kvCache() const { return kvCache_; }
  const KvLayout &kvLayout() const { return kvLayout_; }
  // The batch sizes decode steps are padded to; empty when they are not padded.
  const std::vector<int32_t> &decodeBuckets() const { return decodeBuckets_; }
  // Whether padded decode steps are captured and replayed as device graphs.
  bool capturesDecodeGraphs() const { return captureGraphs_; }
  // Why the last bucket whose capture failed runs without a graph (ok when none failed). A failed
  // capture never fails the step: its uncaptured run already produced the outputs.
  const Status &graphFailure() const { return graphFailure_; }

  // Runs `batch` once untimed (lazy loads, first calls), then `repeats` times op by op with a
  // clock mark after every op, queued back to back so a GPU is not left waiting on the host
  // between ops; and, for a decode step that runs as a graph, `repeats` graph replays. Writes
  // the KV cache like execute() (the same positions each time) and returns no logits.
  Result<StepProfile> profile(const StepBatch &batch, int repeats);
  // The rank's buffers by plan index (for op_cost.h).
  const std::vector<BoundBuffer> &buffers() const { return buffers_; }
  const schema::Rank &rank() const { return rank_; }

private:
  struct StepInputBuffer {
    schema::StepInputKind kind;
    uint32_t kvGroup; // BlockTables / SlotMapping: its KV cache group
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
  Status allocateKvCache(const ExecutorOptions &options);
  Result<int32_t> kvBlocksForUtilization(double utilization);
  Status runProgram(const StepCounts &counts);
  // execute() for a batch asking for at most limits_.maxLogitsPerStep logits rows; with `hidden`
  // their final hidden states too.
  Result<StepOutput> executeWithinLogitsRows(const StepBatch &batch, bool hidden);
  // Where a logits plan's final hidden states are (the lm_head's input), if it has them.
  void findHiddenRows();
  Status runDecodeGraph(size_t bucket, const StepCounts &counts);
  Status runCollective(const ProgramStep &step, const StepCounts &counts);
  Status runProgramStep(const ProgramStep &step, const StepCounts &counts);
  // Fills the step inputs for `batch` (padded to its decode bucket when decode steps are padded)
  // and copies them to the device. Returns the counts as run; `bucket` is set for a padded step.
  Result<StepCounts> stageInputs(const StepBatch &batch, StepOutput &out, StepCounts &counts,
                                 std::optional<size_t> &bucket);
  Status copyStepInputs(const StepCounts &run);
  Result<double> timeGraphReplays(size_t bucket, const StepCounts &run, int repeats);
  Result<DeviceMemory> track(Result<DeviceMemory> memory);

  const Artifact &artifact_;
  Device &device_;
  const schema::Rank &rank_;
  RunnerLimits limits_;
  KvLayout kvLayout_;
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
  std::optional<BoundBuffer> hidden_; // the logits rows' final hidden states (findHiddenRows)
  void *argmaxIds_ = nullptr; // [maxBatch] int32 on the device, when it can argmax rows
  HostStepInputs hostInputs_;
  std::vector<int32_t> decodeBuckets_; // empty: decode steps are not padded
  bool captureGraphs_ = false;
  std::vector<std::unique_ptr<CapturedProgram>> graphs_; // per bucket, captured at first use
  std::vector<bool> eagerBuckets_;                       // per bucket: its capture failed
  std::function<void(const std::string &)> log_;
  Status graphFailure_;
};

} // namespace kiln::rt
