// compileModel(): HF model directory or GGUF file -> model.kiln artifact. The `kiln compile` CLI is
// a thin main over this. Plain C++ interface (no MLIR types): errors are kiln::Status values whose
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
  // "" (as dtype) | fp32 | fp16 | bf16 | fp8: the KV cache's own dtype (--kv-dtype), e.g. fp32
  // activations over a half cache as llama.cpp's default f16 cache, or fp8 E4M3 (per-tensor
  // scale 1, saturating); cpu target only when it differs from dtype (the CUDA kernels read the
  // cache as their activation type).
  std::string kvDtype;
  // An fp8 cache's per-layer scales calibrated by kiln (kiln compile --kv-calibration: one per
  // layer each, finite and positive), used instead of any the checkpoint stores; empty: the
  // checkpoint's k_scale / v_scale, if it has them (compiler/import/kv_cache_scales.h).
  std::vector<float> kvKScales, kvVScales;
  // "" | int8 | int4 | fp8: every weight matrix (linears' w, embedding tables) stored quantized,
  // rounded to nearest from the checkpoint (compiler/transforms/quantize_weights.h): int8 as Q8,
  // int4 as Q4, fp8 as Q8F (E4M3 values, an fp16 scale per row or group; schema/plan.fbs).
  std::string quantize;
  int64_t groupSize = 0; // --group-size: columns per scale; 0: int8 one per row, int4 32
  // A GGUF input's Q8_0 / Q4_0 / Q4_1 matrices and a GPTQ / AWQ checkpoint's 4-bit ones stay
  // packed (Q8, Q4, Q4M, Q4Z) for every target; false dequantizes them into `dtype` (kiln
  // compile clears it when --dtype is given).
  bool keepGgufBlocks = true;
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
