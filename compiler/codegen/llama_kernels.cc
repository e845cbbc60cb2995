#include "compiler/codegen/llama_kernels.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

int64_t dtypeBytes(const std::string &dtype) {
  return dtype == "f32" ? 4 : 2;
}

// Threads for `elements` units of work per CTA: whole warps, at most `cap`.
int64_t threadsFor(int64_t elements, int64_t cap) {
  return std::clamp<int64_t>((elements + 31) / 32 * 32, 32, cap);
}

// 16-byte vectors per row when the row is a whole number of them (elementwise.cuh / norm.cuh).
int64_t vectorsPerRow(int64_t width, const std::string &dtype) {
  const int64_t wide = 16 / dtypeBytes(dtype);
  return width % wide == 0 ? width / wide : width;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

} // namespace

std::string kernelSymbol(const std::string &op,
                         const std::map<std::string, std::string> &constants) {
  std::string symbol = "kiln_" + op;
  for (const auto &[name, value] : constants)
    symbol += "_" + value;
  return symbol;
}

KernelInstance makeKernelInstance(const std::string &op,
                                  std::map<std::string, std::string> constants) {
  KernelInstance instance{op, kernelSymbol(op, constants), std::move(constants)};
  return instance;
}

std::vector<KernelInstance> kernelsForLlama(const LlamaKernelParams &p) {
  const std::string &dtype = p.dtype;
  const std::string &weightDtype = p.weightDtype.empty() ? p.dtype : p.weightDtype;
  const int64_t rotaryDim = p.rotaryDim > 0 ? p.rotaryDim : p.headDim;
  const std::string hidden = str(p.hidden);
  const std::string rowThreads = str(threadsFor(vectorsPerRow(p.hidden, dtype), 256));
  const std::string normThreads = str(threadsFor(vectorsPerRow(p.hidden, dtype), 1024));
  std::map<std::string, std::string> attention = {{"dtype", dtype},
                                                  {"num_heads", str(p.numHeads)},
                                                  {"num_kv_heads", str(p.numKvHeads)},
                                                  {"head_dim", str(p.headDim)},
                                                  {"block_size", str(p.blockSize)}};
  std::map<std::string, std::string> rope = attention;
  rope["rotary_dim"] = str(rotaryDim);
  rope["threads"] = str(threadsFor((p.numHeads + p.numKvHeads) * (rotaryDim / 2), 256));
  std::map<std::string, std::string> reduce = {
      {"dtype", dtype}, {"num_heads", str(p.numHeads)}, {"head_dim", str(p.headDim)}};
  std::map<std::string, std::string> norm = {{"dtype", dtype},
                                             {"weight_dtype", weightDtype},
                                             {"hidden", hidden},
                                             {"threads", normThreads}};
  std::map<std::string, std::string> embedding = norm;
  embedding["threads"] = rowThreads;
  const std::map<std::string, std::string> rows = {
      {"dtype", dtype}, {"width", hidden}, {"threads", rowThreads}};
  return {
      makeKernelInstance("embedding", embedding),
      makeKernelInstance("rms_norm", norm),
      makeKernelInstance("add_rms_norm", norm),
      makeKernelInstance("rope_kv_write", rope),
      makeKernelInstance("attention_decode", attention),
      makeKernelInstance("attention_decode_reduce", reduce),
      makeKernelInstance("attention_prefill", attention),
      makeKernelInstance("silu_mul",
                         {{"dtype", dtype},
                          {"intermediate", str(p.intermediate)},
                          {"threads", str(threadsFor(vectorsPerRow(p.intermediate, dtype), 256))}}),
      makeKernelInstance("add", rows),
      makeKernelInstance("gather_rows", rows),
  };
}

} // namespace kiln::compiler
