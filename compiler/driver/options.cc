// Flag validation: every message names the flag, the value given and the accepted range, since
// this is what a user reads after a typo on the command line.
#include "compiler/driver/options.h"

#include "compiler/driver/gpu_kernels.h"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {
namespace {

Status checkPositive(const char *flag, int64_t value, bool zeroMeansDefault) {
  if (value > 0 || (zeroMeansDefault && value == 0))
    return okStatus();
  return invalidArgument(std::string(flag) + " must be " +
                         (zeroMeansDefault ? "positive (or 0 for the default)" : "positive") +
                         ", got " + std::to_string(value));
}

Status checkTargets(const std::vector<std::string> &targets) {
  if (targets.empty())
    return invalidArgument("--target needs at least one target (cpu)");
  for (const std::string &target : targets) {
    if (target == "cpu")
      continue;
    if (target.rfind("sm_", 0) == 0) {
      KILN_RETURN_IF_ERROR(checkGpuTarget(target));
      continue;
    }
    if (target.rfind("compute_", 0) == 0 && gpuCodegenAvailable())
      return invalidArgument("--target '" + target +
                             "': name an SM target (sm_80, sm_90a); "
                             "the PTX module for newer GPUs is added automatically");
    if (target.rfind("compute_", 0) == 0)
      return checkGpuTarget(target);
    return invalidArgument("--target '" + target + "' is not a known target: use cpu" +
                           (gpuCodegenAvailable() ? " or an SM target (sm_80, sm_90a)" : ""));
  }
  return okStatus();
}

Status checkQuantize(const CompileOptions &options) {
  if (options.quantize.empty()) {
    if (options.groupSize != 0)
      return invalidArgument("--group-size " + std::to_string(options.groupSize) +
                             " needs --quantize int8|int4|fp8");
    return okStatus();
  }
  if (options.quantize != "int8" && options.quantize != "int4" && options.quantize != "fp8")
    return invalidArgument("--quantize '" + options.quantize +
                           "' is not supported: use int8, int4 or fp8");
  if (options.groupSize < 0 || options.groupSize % kQuantSubBlock != 0 ||
      options.groupSize > kMaxGroupSize)
    return invalidArgument("--group-size must be a multiple of " + std::to_string(kQuantSubBlock) +
                           " up to " + std::to_string(kMaxGroupSize) +
                           " (or 0 for the default), got " + std::to_string(options.groupSize));
  return okStatus();
}

Status checkKvDtype(const CompileOptions &options) {
  if (options.kvDtype.empty() || options.kvDtype == options.dtype)
    return okStatus();
  if (options.kvDtype != "fp32" && options.kvDtype != "fp16" && options.kvDtype != "bf16" &&
      options.kvDtype != "fp8")
    return invalidArgument("--kv-dtype '" + options.kvDtype +
                           "' is not supported: use fp32, fp16, bf16 or fp8");
  return okStatus();
}

// Each rank holds whole query heads, whole KV heads and an equal slice of the MLP (the KV cache
// of a rank is its KV heads); the vocab is padded instead, so it need not divide.
Status checkTensorParallel(int64_t tp, const HfModelConfig &config) {
  struct Count {
    const char *field;
    int64_t value;
  };
  for (Count count : {Count{"num_attention_heads", config.numHeads},
                      Count{"num_key_value_heads", config.numKvHeads},
                      Count{"intermediate_size", config.intermediateSize}})
    if (count.value > 0 && count.value % tp != 0)
      return invalidArgument("--tp " + std::to_string(tp) + " does not divide config.json " +
                             count.field + " (" + std::to_string(count.value) +
                             "): every rank needs an equal whole share; use a --tp that divides "
                             "num_attention_heads, num_key_value_heads and intermediate_size");
  return okStatus();
}

} // namespace

Status validateCompileFlags(const CompileOptions &options) {
  if (options.modelDir.empty())
    return invalidArgument("no model directory given");
  if (options.outDir.empty())
    return invalidArgument("no output directory given (-o OUT.kiln)");
  KILN_RETURN_IF_ERROR(checkPositive("--max-batch", options.maxBatch, false));
  KILN_RETURN_IF_ERROR(checkPositive("--max-seq-len", options.maxSeqLen, true));
  KILN_RETURN_IF_ERROR(checkPositive("--max-tokens-per-step", options.maxTokensPerStep, true));
  KILN_RETURN_IF_ERROR(checkPositive("--max-logits-per-step", options.maxLogitsPerStep, true));
  KILN_RETURN_IF_ERROR(checkPositive("--tp", options.tp, false));
  if (options.maxBatch > kMaxBatchLimit)
    return outOfRange("--max-batch " + std::to_string(options.maxBatch) + " exceeds the limit " +
                      std::to_string(kMaxBatchLimit));
  if (options.maxTokensPerStep > kMaxTokensPerStepLimit)
    return outOfRange("--max-tokens-per-step " + std::to_string(options.maxTokensPerStep) +
                      " exceeds the limit " + std::to_string(kMaxTokensPerStepLimit));
  if (options.kvBlockSize < 1 || options.kvBlockSize > 256 ||
      (options.kvBlockSize & (options.kvBlockSize - 1)) != 0)
    return invalidArgument("--kv-block-size must be a power of two in [1, 256], got " +
                           std::to_string(options.kvBlockSize));
  if (options.tp > kMaxTp)
    return outOfRange("--tp " + std::to_string(options.tp) + " exceeds the limit " +
                      std::to_string(kMaxTp));
  if (options.dtype != "fp32" && options.dtype != "fp16" && options.dtype != "bf16")
    return invalidArgument("--dtype '" + options.dtype +
                           "' is not supported: use fp32, fp16 or "
                           "bf16");
  KILN_RETURN_IF_ERROR(checkQuantize(options));
  KILN_RETURN_IF_ERROR(checkKvDtype(options));
  return checkTargets(options.targets);
}

namespace {

// The longest sequence the model's positions are meant for: max_position_embeddings, stretched by
// the factor of the scaling types that extend the context beyond what it was trained on (linear
// and dynamic from max_position_embeddings, yarn from its original length), as vLLM derives
// max_model_len. llama3 and longrope configs already state the extended length.
struct PositionLimit {
  int64_t positions = 0;
  std::string why;
  // Dynamic NTK rescales its frequencies for any length (as transformers does): the limit is only
  // the default, a longer --max-seq-len is the user's call.
  bool extensible = false;
};
PositionLimit positionLimit(const HfModelConfig &config) {
  if (config.positionOffset > 0) // position p reads row p + offset of a learned table
    return {config.positionRows - config.positionOffset,
            "the learned position table's " + std::to_string(config.positionRows) +
                " rows - the position offset (" + std::to_string(config.positionOffset) + ")"};
  const int64_t declared = config.maxPositionEmbeddings;
  PositionLimit limit{declared, "max_position_embeddings (" + std::to_string(declared) + ")"};
  if (!config.ropeScaling)
    return limit;
  const RopeScaling &rope = *config.ropeScaling;
  const bool fromDeclared = rope.type == "linear" || rope.type == "dynamic";
  if (!fromDeclared && rope.type != "yarn")
    return limit;
  const int64_t base = fromDeclared ? declared : rope.originalMaxPositionEmbeddings;
  const auto stretched = static_cast<int64_t>(std::floor(static_cast<double>(base) * rope.factor));
  if (stretched <= declared)
    return limit;
  const std::string from =
      fromDeclared ? "max_position_embeddings" : "rope_scaling's original_max_position_embeddings";
  return {stretched,
          from + " (" + std::to_string(base) + ") x the " + rope.type + " factor (" +
              std::to_string(rope.factor) + ") = " + std::to_string(stretched),
          rope.type == "dynamic"};
}

} // namespace

Result<CompileOptions> resolveCompileOptions(const CompileOptions &options,
                                             const HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(validateCompileFlags(options));
  CompileOptions resolved = options;
  if (config.maxPositionEmbeddings <= 0)
    return invalidArgument("config.json: max_position_embeddings must be positive, got " +
                           std::to_string(config.maxPositionEmbeddings));
  const PositionLimit limit = positionLimit(config);
  if (resolved.maxSeqLen == 0)
    resolved.maxSeqLen = std::min(limit.positions, kDefaultMaxSeqLen);
  if (resolved.maxSeqLen > limit.positions && !limit.extensible)
    return outOfRange("--max-seq-len " + std::to_string(resolved.maxSeqLen) +
                      " exceeds the model's positions: " + limit.why);
  if (resolved.maxTokensPerStep == 0)
    resolved.maxTokensPerStep =
        std::max(resolved.maxBatch,
                 std::min(kDefaultMaxTokensPerStep, resolved.maxBatch * resolved.maxSeqLen));
  // A decode step of a full batch has one token per sequence.
  if (resolved.maxTokensPerStep < resolved.maxBatch)
    return invalidArgument("--max-tokens-per-step (" + std::to_string(resolved.maxTokensPerStep) +
                           ") must be at least --max-batch (" + std::to_string(resolved.maxBatch) +
                           ")");
  // An encoder returns every token's hidden state, and its bidirectional attention needs the whole
  // sequence in one step: one step must hold every row.
  if (config.embeds && resolved.maxLogitsPerStep == 0)
    resolved.maxLogitsPerStep = resolved.maxTokensPerStep;
  if (config.embeds && resolved.maxLogitsPerStep != resolved.maxTokensPerStep)
    return invalidArgument("--max-logits-per-step (" + std::to_string(resolved.maxLogitsPerStep) +
                           ") must equal --max-tokens-per-step (" +
                           std::to_string(resolved.maxTokensPerStep) +
                           ") for an encoder: a step returns every token's hidden state");
  // Sampling asks for one row per sequence, and a padded decode step for one per batch slot.
  if (resolved.maxLogitsPerStep == 0)
    resolved.maxLogitsPerStep =
        std::max(resolved.maxBatch, std::min(kDefaultMaxLogitsPerStep, resolved.maxTokensPerStep));
  if (resolved.maxLogitsPerStep < resolved.maxBatch ||
      resolved.maxLogitsPerStep > resolved.maxTokensPerStep)
    return invalidArgument("--max-logits-per-step (" + std::to_string(resolved.maxLogitsPerStep) +
                           ") must be in [--max-batch, --max-tokens-per-step] = [" +
                           std::to_string(resolved.maxBatch) + ", " +
                           std::to_string(resolved.maxTokensPerStep) + "]");
  KILN_RETURN_IF_ERROR(checkTensorParallel(resolved.tp, config));
  std::vector<std::string> targets;
  for (const std::string &target : resolved.targets)
    if (std::find(targets.begin(), targets.end(), target) == targets.end())
      targets.push_back(target);
  resolved.targets = std::move(targets);
  return resolved;
}

} // namespace kiln::compiler
