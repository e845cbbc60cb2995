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
  std::vector<int32_t> tokenIds;        // [maxTokensPerStep]
  std::vector<int32_t> positions;       // [maxTokensPerStep]
  std::vector<std::vector<int32_t>> slotMapping; // per KV cache group: [maxTokensPerStep]
  std::vector<int32_t> queryStartLoc;   // [maxBatch + 1]
  std::vector<int32_t> contextLens;     // [maxBatch]
  std::vector<int32_t> sequenceLengths; // [maxBatch]
  // Per KV cache group: [maxBatch, maxBlocksPerSeq], rows padded with block 0 (as are the entries
  // a sliding window no longer reads).
  std::vector<std::vector<int32_t>> blockTables;
  std::vector<int32_t> logitsIndices;   // [maxTokensPerStep]
  std::vector<int32_t> lastPositions;   // [maxTokensPerStep]: its sequence's last position
  std::vector<int32_t> shiftedTokenIds; // [maxTokensPerStep]: the token before it (plan.fbs)
  std::vector<int32_t> tokenTypeIds;    // [maxTokensPerStep]: its token type

  explicit HostStepInputs(const RunnerLimits &limits);
  // The filled prefix of the input of `kind` (of KV cache group `group` for SlotMapping and
  // BlockTables) for a step with `counts` (elements).
  std::span<const int32_t> filled(schema::StepInputKind kind, const StepCounts &counts,
                                  uint32_t group = 0) const;

private:
  int32_t maxBlocksPerSeq_ = 0;
};

// Fills `inputs` from a validated batch and sets out.rowsPerSequence / firstRowOfSequence.
StepCounts fillStepInputs(const StepBatch &batch, const RunnerLimits &limits,
                          HostStepInputs &inputs, StepOutput &out);

// Logits rows the whole batch asks for (logitsRowsOf summed over its sequences).
int32_t logitsRowsOf(const StepBatch &batch);
// Fails when the batch asks for more logits rows than one step of the plan returns
// (limits.maxLogitsPerStep); Executor::execute splits such a batch first (splitByLogitsRows).
Status validateLogitsRows(const StepBatch &batch, const RunnerLimits &limits);

// A batch that asks for more than `maxLogits` logits rows (plan.fbs max_logits_per_step) as
// smaller steps to run in order, each asking for at most that many: sequences in batch order,
// grouped while their rows fit, and a kAll sequence with more new tokens than `maxLogits` as
// consecutive chunks of at most `maxLogits` tokens (its sequenceLength kept, so RoPE rotates
// each chunk as in the whole step). kArgmax becomes kLast, since the pieces' rows are merged
// into one logits output. `sources[p][i]` is the batch index of piece p's sequence i.
struct LogitsPieces {
  std::vector<StepBatch> pieces;
  std::vector<std::vector<int32_t>> sources;
};
LogitsPieces splitByLogitsRows(const StepBatch &batch, int32_t maxLogits);
// Appends `piece`'s rows (the output of pieces[p]) to `merged`, the output of the whole batch
// (its rowsPerSequence / firstRowOfSequence sized for the batch, rows in batch order).
void appendPieceOutput(const StepOutput &piece, const std::vector<int32_t> &sources,
                       StepOutput &merged);

// Batch sizes a decode step is padded to: 1, 2, 4, ... below the largest, then the largest,
// min(maxBatch, maxTokensPerStep) (a padded step has one token per sequence).
std::vector<int32_t> decodeBatchBuckets(const RunnerLimits &limits);

// Every sequence of the step has exactly one new token (each has at least one).
inline bool isDecodeOnly(const StepCounts &counts) {
  return counts.numSeqs > 0 && counts.numTokens == counts.numSeqs;
}

// Pads a decode-only step filled by fillStepInputs to `bucket` sequences (numSeqs <= bucket <=
// the largest decodeBatchBuckets), in place. Padding sequence i (numSeqs <= i < bucket) is:
//   token i: id and shifted id 0, position and last position 0, slot -1 in every group (a negative
//   slot writes nothing to the KV cache); queryStartLoc[i + 1] = i + 1 (one token), contextLens[i]
//   = sequenceLengths[i] = 1; block-table row i of every group: all block 0, which always exists,
//   so the attention of the padding row reads one valid cache position; its output is never used.
// Logits indices [numLogits, bucket) are 0 (the first real token): padding logits rows come after
// the real ones and are dropped. Returns the counts the padded step runs with: bucket tokens,
// sequences and logits, and maxContextLen = limits.maxSeqLen so no kernel grid depends on the
// step's lengths (a captured graph serves every step of its bucket).
StepCounts padDecodeStep(const StepCounts &counts, int32_t bucket, const RunnerLimits &limits,
                         HostStepInputs &inputs);

} // namespace kiln::rt
