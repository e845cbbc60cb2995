// A GGUF file's tensors under their Hugging Face names and in HF layout (compiler/import/
// checkpoint.h): "blk.3.attn_q.weight" is "model.layers.3.self_attn.q_proj.weight", GGUF's
// innermost-first dims become the row-major shape, quantized blocks dequantize to fp32
// (gguf_dequant.h), and for llama files the q/k rows that llama.cpp's converter permuted for its
// interleaved rope are put back in HF's rotate-half order. GGUF tensors with no HF counterpart
// (rope factor tables, read into the config by gguf_config.h) are not listed.
#pragma once

#include "compiler/import/checkpoint.h"
#include "compiler/import/gguf_config.h"
#include "compiler/import/gguf_file.h"

#include <map>
#include <memory>

namespace kiln::compiler {

class GgufCheckpoint final : public Checkpoint {
public:
  // `numHeads` / `numKvHeads` give the q and k row permutation when `arch.permutedQk`.
  static Result<std::shared_ptr<const GgufCheckpoint>> create(std::shared_ptr<const GgufFile> gguf,
                                                              const GgufArchitecture &arch,
                                                              int64_t numHeads, int64_t numKvHeads);

  bool contains(const std::string &name) const override;
  Result<const TensorInfo *> info(const std::string &name) const override;
  std::vector<std::string> names() const override;
  Result<std::span<const uint8_t>> rawBytes(const std::string &name) const override;
  Result<std::vector<float>> readF32(const std::string &name) const override;
  Result<QuantizedMatrix> readPacked(const std::string &name) const override;

  // The HF name of a GGUF tensor name, "" when it has none.
  static std::string hfName(const std::string &ggufName, const GgufArchitecture &arch);

private:
  struct Entry {
    TensorInfo info;          // HF name and shape
    const GgufTensor *tensor; // in gguf_
    int64_t permuteHeads = 0; // > 0: rows are llama.cpp's interleaved order for this many heads
  };
  std::shared_ptr<const GgufFile> gguf_;
  std::map<std::string, Entry> entries_;
};

} // namespace kiln::compiler
