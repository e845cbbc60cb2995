// Where a compile's weights come from: a Checkpoint names tensors by their Hugging Face names
// ("model.layers.0.self_attn.q_proj.weight") and hands out their values in HF layout, whatever
// the file format. SafetensorsCheckpoint (safetensors.h) reads HF checkpoints as stored;
// GgufCheckpoint (gguf_checkpoint.h) maps a GGUF file's tensors to HF names and layout,
// dequantizing. The binder and the weight writer (compiler/emit/weight_sources.h) only see this.
#pragma once

#include "compiler/import/quantized_matrix.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::compiler {

// kI32: only the packed words of quantized checkpoints (hf_quantized_checkpoint.h), read raw.
enum class TensorDType { kF32, kF16, kBF16, kI32, kF8E4M3 };
const char *tensorDTypeName(TensorDType dtype); // "F32", "F16", "BF16", "I32", "F8_E4M3"
size_t tensorDTypeSize(TensorDType dtype);

struct TensorInfo {
  std::string name; // the stored name
  TensorDType dtype = TensorDType::kF32;
  // rawBytes() holds the HF-layout values in `dtype`, row-major. False when the values exist
  // only through readF32 (a quantized GGUF tensor, or one whose rows the import reorders);
  // `dtype` is then the widest type the values fit exactly.
  bool rawReadable = true;
  std::vector<int64_t> shape; // HF layout, outermost first
  int fileIndex = 0;
  uint64_t offset = 0; // absolute byte offset in its file
  uint64_t size = 0;   // stored bytes
  // The artifact's quantized format (with its group size) that the stored blocks are, when
  // readPacked hands them out as they are: a GGUF Q8_0 / Q4_0 / Q4_1 matrix.
  struct Packed {
    QuantFormat format = QuantFormat::kQ8;
    int64_t groupSize = 0;
  };
  std::optional<Packed> packed;
  int64_t numElements() const;
};

class Checkpoint {
public:
  virtual ~Checkpoint() = default;
  virtual bool contains(const std::string &name) const = 0;
  virtual Result<const TensorInfo *> info(const std::string &name) const = 0;
  virtual std::vector<std::string> names() const = 0; // sorted
  // The stored bytes of a tensor whose info says rawReadable; an error otherwise.
  virtual Result<std::span<const uint8_t>> rawBytes(const std::string &name) const = 0;
  // The tensor converted to fp32, row-major in HF layout.
  virtual Result<std::vector<float>> readF32(const std::string &name) const = 0;
  // The stored blocks of a tensor whose info has `packed`, in HF layout; an error otherwise.
  virtual Result<QuantizedMatrix> readPacked(const std::string &name) const;
};

} // namespace kiln::compiler
