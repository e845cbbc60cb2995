// A Hugging Face checkpoint's `quantization_config` (config.json) for the 4-bit weight-only
// formats kiln reads: GPTQ (`quant_method: gptq`, as AutoGPTQ / GPTQModel / optimum write it) and
// AWQ (`quant_method: awq`, AutoAWQ's GEMM layout). How their tensors are laid out and read:
// compiler/import/hf_quantized_checkpoint.h. Plain C++ (no MLIR).
#pragma once

#include "compiler/import/config_fields.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::compiler {

struct HfQuantization {
  enum class Method { kGptq, kAwq };
  Method method = Method::kGptq;
  int64_t groupSize = 0; // input columns per scale and zero point; 0: one per output (-1 in HF)
  // GPTQ `sym`: every zero point is 8, so w = s * (q - 8), kiln's Q4. AWQ is always asymmetric.
  bool symmetric = false;
  // GPTQ's original checkpoint format ("gptq", the default) stores each zero point minus one;
  // "gptq_v2" stores it as is.
  bool zerosMinusOne = false;
  const char *methodName() const { return method == Method::kGptq ? "gptq" : "awq"; }
};

// nullopt when config.json has no quantization_config; an error naming the field for what kiln
// cannot read (another quant_method, bits other than 4, GPTQ with desc_act, AWQ other than GEMM
// or without zero points, a group_size that is neither -1 nor positive).
Result<std::optional<HfQuantization>> parseHfQuantization(const ConfigFields &config);

} // namespace kiln::compiler
