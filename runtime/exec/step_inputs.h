// Host side of a step: validating a StepBatch against the runner's limits and flattening it into
// the plan's step inputs (plan.fbs StepInputKind). Pure host code, no device.
#pragma once

#include "runtime/exec/step.h"
#include "runtime/hal/device.h"

#include <cstdint>
#include <vector>

namespace kiln::rt {

// Fails on a batch that a runner with `limits` cannot run; the message names the sequence, the
// offending value and the limit (with the compile flag that raises it, when there is one).
Status validateStep(const StepBatch &batch, const RunnerLimits &limits);

// The step inputs in host memory, sized once at the compiled maxima so filling never allocates.
struct HostStepInputs {
  std::vector<int32_t> tokenIds;      // [maxTokensPerStep]
  std::vector<int32_t> positions;     // [maxTokensPerStep]
  std::vector<int32_t> slotMapping;   // [maxTokensPerStep]
  std::vector<int32_t> queryStartLoc; // [maxBatch + 1]
  std::vector<int32_t> contextLens;   // [maxBatch]
  std::vector<int32_t> blockTables;   // [maxBatch, maxBlocksPerSeq], rows padded with block 0
  std::vector<int32_t> logitsIndices; // [maxTokensPerStep]

  explicit HostStepInputs(const RunnerLimits &limits);
  // The filled prefix of the input of `kind` for a step with `counts` (elements).
  std::span<const int32_t> filled(schema::StepInputKind kind, const StepCounts &counts) const;

private:
  int32_t maxBlocksPerSeq_ = 0;
};

// Fills `inputs` from a validated batch and sets out.rowsPerSequence / firstRowOfSequence.
StepCounts fillStepInputs(const StepBatch &batch, const RunnerLimits &limits,
                          HostStepInputs &inputs, StepOutput &out);

} // namespace kiln::rt
