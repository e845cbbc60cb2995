// The kernel instances a Llama-family plan needs (Llama 1/2/3, Mistral, Qwen2: same ops).
#pragma once

#include "compiler/codegen/kernel_catalog.h"

#include <string>
#include <vector>

namespace kiln::compiler {

struct LlamaKernelParams {
  int64_t hidden = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t intermediate = 0;
  int64_t blockSize = 16;     // KV cache block size
  int64_t rotaryDim = 0;      // 0: headDim
  std::string dtype = "bf16"; // activations and KV cache: "f32", "f16", "bf16"
  std::string weightDtype;    // embedding table and norm weights; empty: dtype
};

// Embedding, RmsNorm, AddRmsNorm, RopeKvWrite, the three attention kernels, SiluMul, Add and
// GatherRows, specialized for `params`; symbols from kernelSymbol(). Linears (cuBLASLt) are
// library ops, not kernels.
std::vector<KernelInstance> kernelsForLlama(const LlamaKernelParams &params);

// A stable, readable symbol: "kiln_" + op + each constant's value in name order, e.g.
// kiln_rms_norm_bf16_4096_512_bf16 (dtype, hidden, threads, weight_dtype).
std::string kernelSymbol(const std::string &op,
                         const std::map<std::string, std::string> &constants);
KernelInstance makeKernelInstance(const std::string &op,
                                  std::map<std::string, std::string> constants);

} // namespace kiln::compiler
