// A Hugging Face checkpoint's `quantization_config` (config.json) for the weight-only formats kiln
// reads: 4-bit GPTQ (`quant_method: gptq`, as AutoGPTQ / GPTQModel / optimum write it) and AWQ
// (`quant_method: awq`, AutoAWQ's GEMM layout), whose tensors compiler/import/
// hf_quantized_checkpoint.h reads, and fp8 weights with fp32 scales, whose tensors
// compiler/import/hf_fp8_checkpoint.h reads: block scales (`quant_method: fp8`, transformers'
// FineGrainedFP8Config as DeepSeek-V3 and the Qwen3 FP8 checkpoints use it) or one scale per
// tensor, per output channel or per block (`quant_method: compressed-tensors`, format
// float-quantized, as llm-compressor writes the FP8 checkpoints vLLM serves). Plain C++ (no MLIR).
#pragma once

#include "compiler/import/config_fields.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::compiler {

struct HfQuantization {
  enum class Method { kGptq, kAwq, kFp8 };
  Method method = Method::kGptq;
  int64_t groupSize = 0; // input columns per scale and zero point; 0: one per output (-1 in HF)
  // GPTQ `sym`: every zero point is 8, so w = s * (q - 8), kiln's Q4. AWQ is always asymmetric.
  bool symmetric = false;
  // GPTQ's original checkpoint format ("gptq", the default) stores each zero point minus one;
  // "gptq_v2" stores it as is.
  bool zerosMinusOne = false;
  // fp8: each weight block of blockRows outputs x blockColumns inputs shares one fp32 scale
  // (fp8's weight_block_size, [128, 128] unless given; compressed-tensors' strategy), 0 meaning the
  // whole dimension: per tensor 0 x 0, per output channel 1 x 0.
  int64_t blockRows = 0, blockColumns = 0;
  // compressed-tensors names each weight's scales "<linear>.weight_scale", fp8
  // "<linear>.weight_scale_inv"; both multiply.
  bool compressedTensors = false;
  const char *methodName() const {
    return method == Method::kGptq  ? "gptq"
           : method == Method::kAwq ? "awq"
           : compressedTensors      ? "compressed-tensors"
                                    : "fp8";
  }
};

// nullopt when config.json has no quantization_config; an error naming the field for what kiln
// cannot read (another quant_method, bits other than 4, GPTQ with desc_act, AWQ other than GEMM
// or without zero points, a group_size that is neither -1 nor positive, an fp8 format other than
// e4m3 or a weight_block_size that is not two positive integers).
Result<std::optional<HfQuantization>> parseHfQuantization(const ConfigFields &config);

} // namespace kiln::compiler
