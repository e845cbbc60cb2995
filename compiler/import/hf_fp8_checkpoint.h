// An fp8 checkpoint (compiler/import/hf_quantization.h, `quant_method: fp8` or compressed-tensors
// float-quantized) as a Checkpoint of ordinary "<linear>.weight" tensors [out, in] in HF layout.
// The published layouts (transformers' FineGrainedFP8 linears, as DeepSeek-V3's and Qwen3-FP8's
// checkpoints store them; llm-compressor's compressed-tensors):
//   <linear>.weight            F8_E4M3 [out, in], e4m3 as the OCP spec has it (runtime/base/fp8.h)
//   <linear>.weight_scale_inv  (fp8) or <linear>.weight_scale (compressed-tensors): F32
//                              [ceil(out / blockRows), ceil(in / blockColumns)], a block size of 0
//                              the whole dimension: per tensor [1] (or a scalar, or [1, 1]), per
//                              channel [out, 1] (or [out])
//   w[o][k] = e4m3(weight[o][k]) * scale[o / blockRows][k / blockColumns]
// rounded once to fp32, as a reference that dequantizes the layout in fp32 gets it; the scales
// (and a static checkpoint's input_scale, a kv_cache_scheme's k_scale / v_scale, which
// compiler/import/kv_cache_scales.h reads from the stored checkpoint) are not listed themselves.
// Linears the quantizer left alone (modules_to_not_convert / ignore, e.g. lm_head) and every other
// tensor pass through. A weight whose column blocks are whole groups of kiln's layout
// (blockColumns, or the whole row for per-tensor and per-channel scales, a multiple of 32 that
// divides `in`) also reports `packed` Q8F32 with that group, and readPacked hands out its e4m3
// bytes as stored with each row's fp32 block scales (a block's scale repeated for each of its
// rows): the same weights, kept in fp8 when the compile keeps packed weights (no --dtype). Any
// other block shape (DeepSeek's 128 x 128 blocks are whole groups; 48-column blocks are not) comes
// only through readF32.
#pragma once

#include "compiler/import/hf_quantization.h"
#include "compiler/import/quantized_linears_checkpoint.h"

#include <map>
#include <memory>

namespace kiln::compiler {

class HfFp8Checkpoint final : public QuantizedLinearsCheckpoint {
public:
  // Fails naming the tensor when an F8_E4M3 weight has no scales, or either's shape or dtype
  // disagrees with the layout.
  static Result<std::shared_ptr<const HfFp8Checkpoint>>
  create(std::shared_ptr<const Checkpoint> stored, const HfQuantization &quantization);

  Result<std::vector<float>> readF32(const std::string &name) const override;
  // Fails naming the tensor and position where an e4m3 byte is NaN (0x7F or 0xFF).
  Result<QuantizedMatrix> readPacked(const std::string &name) const override;
  // Linears whose weights report `packed`.
  size_t packableLinears() const { return packable_; }

private:
  HfFp8Checkpoint(std::shared_ptr<const Checkpoint> stored, const HfQuantization &q)
      : QuantizedLinearsCheckpoint(std::move(stored), q.methodName()), quantization_(q) {}

  struct Linear {
    std::string scaleName;
    int64_t out = 0, in = 0;
    int64_t blockRows = 0, blockColumns = 0; // resolved: whole dimensions for 0
  };
  Status addLinear(const TensorInfo &weight);

  HfQuantization quantization_;
  std::map<std::string, Linear> linears_; // by weight name
  size_t packable_ = 0;
};

} // namespace kiln::compiler
