// A deterministic ModelRunner for tests and model-free benchmarks of the layers above exec.
// It keeps a fake paged KV cache holding the token id written at each slot. Each step writes the
// new tokens through the block tables, then reads every position back through them, and derives a
// logits row from a hash of the token history read: so outputs depend only on a sequence's tokens
// (never on batch composition), and any block-table bug (a wrong, stale or shared-and-overwritten
// block) changes the logits and shows up as a different output. With KV cache groups
// (RunnerLimits::kvGroupWindows) every group's table is written, and the history is what each
// group's layers see: all positions, or the last W of a sliding-window group.
#pragma once

#include "runtime/exec/step.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace kiln::rt {

struct FakeRunnerConfig {
  RunnerLimits limits;
  uint64_t seed = 0;
  // Added to the eos ids' logits so sequences end at tunable lengths.
  std::vector<int32_t> eosTokenIds;
  float eosLogitBoost = 0.0f;
  // Answer steps in which every sequence wanting logits asks for LogitsWanted::kArgmax with
  // StepOutput::argmaxIds (argmaxToken of each row) and no logits, as an executor whose device
  // can argmax rows does; off: such steps get full rows, as on a device that cannot.
  bool answerArgmax = false;
};

struct FakeRunnerStats {
  uint64_t steps = 0;  // successful executes
  uint64_t tokens = 0; // tokens computed
  int32_t maxTokensInStep = 0;
  int32_t maxSequencesInStep = 0;
  uint64_t argmaxSteps = 0; // steps answered with argmaxIds
};

class FakeRunner : public ModelRunner {
public:
  explicit FakeRunner(const FakeRunnerConfig &config);

  const RunnerLimits &limits() const override { return config_.limits; }
  Result<StepOutput> execute(const StepBatch &batch) override;

  // The logits the runner gives after `history` (all tokens up to and including the last one).
  void logitsFor(std::span<const int32_t> history, std::span<float> out) const;
  // Called before each execute; a non-OK status fails that execute.
  void setFailureHook(std::function<Status(const StepBatch &)> hook) {
    failureHook_ = std::move(hook);
  }
  const FakeRunnerStats &stats() const { return stats_; }

private:
  Status checkBatch(const StepBatch &batch) const;
  Status writeTokens(const StepBatch &batch);
  Result<std::vector<int32_t>> readHistory(const SequenceStep &seq, int32_t lastPosition) const;
  Status checkTables(const SequenceStep &seq, size_t index) const;
  int64_t slotOf(const SequenceStep &seq, int32_t group, int32_t position) const;

  FakeRunnerConfig config_;
  std::vector<int32_t> kvTokens_;    // token id at each slot, -1 if never written
  std::vector<uint64_t> writeStamp_; // execute call that last wrote each slot
  uint64_t executeCalls_ = 0;
  std::function<Status(const StepBatch &)> failureHook_;
  FakeRunnerStats stats_;
};

} // namespace kiln::rt
