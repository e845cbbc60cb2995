// compileModel(): HF model directory or GGUF file -> model.kiln artifact. The `kiln compile` CLI is a thin
// main over this. Plain C++ interface (no MLIR types): errors are kiln::Status values whose
// messages name the flag, config field or tensor and the limit that was violated.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kiln::compiler {

struct CompileOptions {
  std::string modelDir, outDir; // modelDir: a HF model directory, or a GGUF path (gguf_file.h)
  int64_t maxBatch = 8;
  int64_t maxSeqLen = 0;        // 0: min(the model's positions, 4096) (compiler/driver/options.cc)
  int64_t maxTokensPerStep = 0; // 0: max(max_batch, min(2048, max_batch * max_seq_len))
  // Rows of the logits buffer, the most logits rows one step returns (in [max_batch,
  // max_tokens_per_step]); 0: max(max_batch, min(64, max_tokens_per_step)). A step asking for
  // more (kiln verify's every-token logits) is run in pieces by the executor.
  int64_t maxLogitsPerStep = 0;
  int64_t tp = 1;
  int64_t kvBlockSize = 16;
  std::string dtype = "fp32"; // fp32 | fp16 | bf16: matrices, activations and KV cache (logits F32)
  std::vector<std::string> targets = {"cpu"};
  bool dumpIr = false;         // print the module after building and after each pass to `log`
  std::ostream *log = nullptr; // progress lines; nullptr: silent
};

Status compileModel(const CompileOptions &options);

// The config.json model_types kiln compiles, "llama, mistral, ..." (compiler/models/
// model_family.h supportedModelTypes).
std::string supportedModelTypes();
// The GGUF general.architecture values kiln compiles (compiler/import/gguf_config.h).
std::string supportedGgufArchitectures();

} // namespace kiln::compiler
