#include "runtime/exec/kv_calibration.h"

#include "runtime/artifact/artifact.h"
#include "runtime/exec/elements.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/device.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kiln::rt {
namespace {

constexpr float kFp8Max = 448.0f;

// The largest |value| layer `layer`'s K (or V) holds at positions [0, length) of a sequence with
// block table `table` (the layer's group's).
float absMaxOf(const void *cache, const KvCacheBinding &kv, int32_t kvHeads, int32_t headDim,
               const std::vector<int32_t> &table, int32_t length) {
  float largest = 0;
  const int32_t bs = kv.blockSize;
  for (int32_t p = 0; p < length; ++p)
    for (int32_t h = 0; h < kvHeads; ++h) {
      const size_t row = (size_t(table[p / bs]) * kvHeads + h) * bs + p % bs;
      for (int32_t d = 0; d < headDim; ++d)
        largest = std::max(largest, std::fabs(loadElement(cache, row * headDim + d, kv.dtype)));
    }
  return largest;
}

Status checkPrompts(const std::vector<std::vector<int32_t>> &prompts, const RunnerLimits &limits) {
  if (prompts.empty())
    return invalidArgument("no calibration prompts");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = "calibration prompt " + std::to_string(i + 1);
    if (prompts[i].empty())
      return invalidArgument(name + " has no tokens");
    if (static_cast<int64_t>(prompts[i].size()) > limits.maxSeqLen)
      return outOfRange(name + " has " + std::to_string(prompts[i].size()) +
                        " tokens; the artifact's --max-seq-len is " +
                        std::to_string(limits.maxSeqLen));
    for (int32_t id : prompts[i])
      if (id < 0 || id >= limits.vocabSize)
        return invalidArgument(name + " holds token id " + std::to_string(id) +
                               "; the vocabulary has " + std::to_string(limits.vocabSize) +
                               " tokens");
  }
  return okStatus();
}

// One prompt as prefill steps of at most maxTokensPerStep tokens, no logits.
Status runPrompt(Executor &executor, const std::vector<int32_t> &prompt,
                 const std::vector<std::vector<int32_t>> &tables) {
  const auto length = static_cast<int32_t>(prompt.size());
  const int32_t chunk = executor.limits().maxTokensPerStep;
  for (int32_t start = 0; start < length; start += chunk) {
    SequenceStep seq;
    seq.tokenIds.assign(prompt.begin() + start, prompt.begin() + std::min(length, start + chunk));
    seq.startPosition = start;
    seq.blockTables = tables;
    seq.logits = LogitsWanted::kNone;
    seq.sequenceLength = length;
    StepBatch batch;
    batch.sequences.push_back(std::move(seq));
    KILN_RETURN_IF_ERROR(executor.execute(batch).status());
  }
  return okStatus();
}

} // namespace

Result<KvCalibration> calibrateKvCache(const std::string &artifactDir,
                                       const std::vector<std::vector<int32_t>> &prompts) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Artifact> artifact, Artifact::load(artifactDir));
  const schema::KvCacheSpec &spec = *artifact->plan().kv_cache();
  if (spec.dtype() != schema::DType::F32 && spec.dtype() != schema::DType::BF16 &&
      spec.dtype() != schema::DType::F16)
    return invalidArgument(artifactDir +
                           ": calibration reads a KV cache of fp32, bf16 or fp16, not " +
                           schema::EnumNameDType(spec.dtype()));
  if (artifact->plan().tp() > 1)
    return invalidArgument(artifactDir + ": calibration runs a tp 1 artifact");
  int32_t longest = 1;
  for (const std::vector<int32_t> &p : prompts)
    longest = std::max(longest, static_cast<int32_t>(p.size()));
  const auto *groups = spec.groups();
  const int32_t numGroups = groups && groups->size() > 0 ? int32_t(groups->size()) : 1;
  const int32_t bs = static_cast<int32_t>(spec.block_size());
  const int32_t blocks = (longest + bs - 1) / bs;
  ExecutorOptions options;
  options.numKvBlocks = blocks * numGroups;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, createDevice("cpu"));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                        Executor::create(*artifact, *device, options));
  const RunnerLimits &limits = executor->limits();
  if (limits.embeds)
    return invalidArgument(artifactDir + ": an embedding model's KV cache is not calibrated");
  KILN_RETURN_IF_ERROR(checkPrompts(prompts, limits));
  const KvCacheBinding &kv = executor->kvCache();
  const KvLayout &layout = executor->kvLayout();
  const auto kvHeads = static_cast<int32_t>(spec.num_kv_heads());
  const auto headDim = static_cast<int32_t>(spec.head_dim());
  KvCalibration out;
  out.kAbsMax.assign(spec.num_layers(), 0.0f);
  out.vAbsMax.assign(spec.num_layers(), 0.0f);
  const std::vector<std::vector<int32_t>> tables = ownBlockTables(limits, 0, blocks);
  for (const std::vector<int32_t> &prompt : prompts) {
    KILN_RETURN_IF_ERROR(runPrompt(*executor, prompt, tables));
    const auto length = static_cast<int32_t>(prompt.size());
    for (uint32_t l = 0; l < spec.num_layers(); ++l) {
      const std::vector<int32_t> &table = tables[layout.groupOfLayer[l]];
      out.kAbsMax[l] =
          std::max(out.kAbsMax[l], absMaxOf(kv.keys[l], kv, kvHeads, headDim, table, length));
      out.vAbsMax[l] =
          std::max(out.vAbsMax[l], absMaxOf(kv.values[l], kv, kvHeads, headDim, table, length));
    }
    out.tokens += length;
  }
  // In double, rounded to fp32 once (as the golden script's numpy does).
  auto scaleOf = [](float absMax) {
    return absMax > 0 ? static_cast<float>(double(absMax) * kKvScaleHeadroom / kFp8Max) : 1.0f;
  };
  std::transform(out.kAbsMax.begin(), out.kAbsMax.end(), std::back_inserter(out.kScales), scaleOf);
  std::transform(out.vAbsMax.begin(), out.vAbsMax.end(), std::back_inserter(out.vScales), scaleOf);
  return out;
}

} // namespace kiln::rt
