// Executor::profile (kiln profile): a step timed op by op with the device's clock.
#include "runtime/exec/executor.h"

#include <algorithm>

namespace kiln::rt {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Microseconds from each mark to the next, for `count` consecutive intervals from `first`.
Result<std::vector<double>> intervals(const DeviceClock &clock, size_t first, size_t count) {
  std::vector<double> micros;
  for (size_t i = 0; i < count; ++i) {
    KILN_ASSIGN_OR_RETURN(double ms, clock.millisBetween(first + i, first + i + 1));
    micros.push_back(ms * 1000.0);
  }
  return micros;
}

} // namespace

Result<StepProfile> Executor::profile(const StepBatch &batch, int repeats) {
  if (repeats < 1)
    return invalidArgument("profile repeats " + std::to_string(repeats) + " must be at least 1");
  KILN_RETURN_IF_ERROR(validateStep(batch, limits_));
  KILN_RETURN_IF_ERROR(validateLogitsRows(batch, limits_));
  StepOutput unused;
  StepProfile profile;
  profile.counts = fillStepInputs(batch, limits_, hostInputs_, unused);
  KILN_RETURN_IF_ERROR(copyStepInputs(profile.counts));
  KILN_RETURN_IF_ERROR(runProgram(profile.counts));
  KILN_RETURN_IF_ERROR(device_.synchronize());

  // Marks: per repeat, one before the first op and one after every op; the host queues every
  // repeat before it waits, so a GPU runs the ops back to back once the queue is ahead.
  const size_t ops = program_.size(), perRepeat = ops + 1;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock,
                        device_.createClock(perRepeat * static_cast<size_t>(repeats)));
  for (size_t r = 0; r < static_cast<size_t>(repeats); ++r) {
    KILN_RETURN_IF_ERROR(clock->mark(r * perRepeat));
    for (size_t i = 0; i < ops; ++i) {
      KILN_RETURN_IF_ERROR(runProgramStep(program_[i], profile.counts));
      KILN_RETURN_IF_ERROR(clock->mark(r * perRepeat + i + 1));
    }
  }
  KILN_RETURN_IF_ERROR(device_.synchronize());
  std::vector<std::vector<double>> samples(ops);
  std::vector<double> steps;
  for (size_t r = 0; r < static_cast<size_t>(repeats); ++r) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> micros, intervals(*clock, r * perRepeat, ops));
    for (size_t i = 0; i < ops; ++i)
      samples[i].push_back(micros[i]);
    KILN_ASSIGN_OR_RETURN(double stepMs, clock->millisBetween(r * perRepeat, r * perRepeat + ops));
    steps.push_back(stepMs * 1000.0);
  }
  for (std::vector<double> &opSamples : samples)
    profile.opMicros.push_back(median(std::move(opSamples)));
  for (const ProgramStep &step : program_)
    profile.opImpls.push_back(step.prepared ? device_.describeOp(*step.prepared, profile.counts)
                                            : std::string());
  profile.eagerMicros = median(std::move(steps));

  std::optional<size_t> bucket;
  StepCounts counts;
  KILN_ASSIGN_OR_RETURN(const StepCounts run, stageInputs(batch, unused, counts, bucket));
  if (bucket && captureGraphs_) {
    KILN_ASSIGN_OR_RETURN(profile.graphMicros, timeGraphReplays(*bucket, run, repeats));
    profile.graphBatch = profile.graphMicros > 0 ? decodeBuckets_[*bucket] : 0;
  }
  return profile;
}

// 0 when the bucket's capture failed (it runs without a graph).
Result<double> Executor::timeGraphReplays(size_t bucket, const StepCounts &run, int repeats) {
  KILN_RETURN_IF_ERROR(runDecodeGraph(bucket, run)); // captures the bucket when not yet done
  KILN_RETURN_IF_ERROR(device_.synchronize());
  if (!graphs_[bucket])
    return 0.0;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock,
                        device_.createClock(static_cast<size_t>(repeats) + 1));
  KILN_RETURN_IF_ERROR(clock->mark(0));
  for (size_t r = 0; r < static_cast<size_t>(repeats); ++r) {
    KILN_RETURN_IF_ERROR(device_.replay(*graphs_[bucket]));
    KILN_RETURN_IF_ERROR(clock->mark(r + 1));
  }
  KILN_RETURN_IF_ERROR(device_.synchronize());
  KILN_ASSIGN_OR_RETURN(std::vector<double> micros,
                        intervals(*clock, 0, static_cast<size_t>(repeats)));
  return median(std::move(micros));
}

} // namespace kiln::rt
