// Lowering of the fused, memory-planned kiln module to the artifact plan (schema/plan.fbs): walks
// func @step in order, maps values to buffers (weights, activations at their planned arena
// offsets, step inputs) and ops to schema Ops with inputs/outputs exactly as plan.fbs documents.
#pragma once

#include "compiler/import/checkpoint.h"
#include "compiler/import/hf_config.h"
#include "runtime/artifact/artifact_writer.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::compiler {

struct EmitOptions {
  std::string modelDir; // tokenizer/config files are taken from here
  int64_t maxBatch = 0;
  int64_t maxSeqLen = 0;
  int64_t maxTokensPerStep = 0; // must equal what plan-memory planned for
  int64_t maxLogitsPerStep = 0; // likewise; 0: maxTokensPerStep
  int64_t kvBlockSize = 0;
  std::string kvDtype; // "" (the activations' dtype) | fp32 | fp16 | bf16 | fp8
  // An fp8 cache's calibrated per-layer scales (plan.fbs KvCacheSpec.k_scales); empty: none.
  std::vector<float> kvKScales, kvVScales;
  int64_t tp = 1;      // tensor-parallel degree: one module per rank
  std::vector<std::string> targets;
};

// The artifact's contents: the plan (all but the rank's weights index, which the writer fills in
// the order of `rankWeights[0]`, so Buffer.weight indexes that list) and lazy weight producers
// reading `checkpoint`. Errors are emitted as diagnostics on the offending op.
mlir::FailureOr<rt::ArtifactContents>
emitArtifactContents(mlir::ModuleOp module, const HfModelConfig &config,
                     std::shared_ptr<const Checkpoint> checkpoint, const EmitOptions &options);
// Tensor parallelism: `rankModules[r]` is rank r's sharded, fused, memory-planned module (one per
// rank, options.tp of them); rank r's weights go to weights.rank<r>.bin.
mlir::FailureOr<rt::ArtifactContents>
emitArtifactContents(llvm::ArrayRef<mlir::ModuleOp> rankModules, const HfModelConfig &config,
                     std::shared_ptr<const Checkpoint> checkpoint, const EmitOptions &options);

// The model's chat template: chat_template.jinja when present (transformers 4.47+ saves it there),
// else tokenizer_config.json "chat_template" when a string, or the entry named "default" of a
// list of named templates; "" when there is none. Fails on a tokenizer_config.json that is not
// JSON.
Result<std::string> readChatTemplate(const std::string &modelDir);

// The files copied into the artifact beside the plan: those of tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, generation_config.json and config.json that
// exist in `modelDir`, as paths.
std::vector<std::string> extraModelFiles(const std::string &modelDir);

} // namespace kiln::compiler
