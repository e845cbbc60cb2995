// A GPTQ or AWQ checkpoint (compiler/import/hf_quantization.h) as a Checkpoint of ordinary
// "<linear>.weight" tensors [out, in] in HF layout: each linear's stored qweight, qzeros and
// scales (and GPTQ's g_idx) stand for the weight w[o][k] = scale[g][o] * (q[k][o] - zero[g][o]),
// g = k / group_size, and are not listed themselves; every other tensor passes through.
//
// The published layouts, 4-bit values in int32 words, value i of a word in bits 4i..4i+3:
//   GPTQ  qweight [in / 8, out]: word [k / 8][o] holds q[k][o] as value k % 8 (packed down the
//         inputs); qzeros [groups, out / 8]: word [g][o / 8] holds zero[g][o] as value o % 8,
//         stored minus one in the original "gptq" format; scales [groups, out] fp16; g_idx [in]
//         must be k / group_size (desc_act false).
//   AWQ   qweight [in, out / 8]: word [k][o / 8] holds q[k][o] as value j where o % 8 is
//         kAwqOrder[j] = {0, 2, 4, 6, 1, 3, 5, 7}; qzeros [groups, out / 8] packed the same way;
//         scales [groups, out] fp16.
// Every such weight reports `packed` (the group size; one group per row for group_size -1) and
// readPacked hands out the 4-bit values, fp16 scales and zero points as they are: symmetric GPTQ
// (every zero 8) as kiln's Q4, AWQ and asymmetric GPTQ as Q4Z (w = scale * (u - zero)). readF32
// gives the exact fp32 values (GPU targets, --dtype). A group size that is not a multiple of 32
// (kiln's groups are) leaves the weight unpacked: fp32 values only.
#pragma once

#include "compiler/import/hf_quantization.h"
#include "compiler/import/quantized_linears_checkpoint.h"

#include <map>
#include <memory>

namespace kiln::compiler {

class HfQuantizedCheckpoint final : public QuantizedLinearsCheckpoint {
public:
  // Fails naming the tensor when a linear's qweight lacks its qzeros or scales, a shape or dtype
  // disagrees with the layout, or g_idx is not k / group_size.
  static Result<std::shared_ptr<const HfQuantizedCheckpoint>>
  create(std::shared_ptr<const Checkpoint> stored, const HfQuantization &quantization);

  Result<std::vector<float>> readF32(const std::string &name) const override;
  Result<QuantizedMatrix> readPacked(const std::string &name) const override;

private:
  HfQuantizedCheckpoint(std::shared_ptr<const Checkpoint> stored, const HfQuantization &q)
      : QuantizedLinearsCheckpoint(std::move(stored), q.methodName()), quantization_(q) {}

  struct Linear {
    TensorInfo info;       // the weight's: [out, in], fp32, not raw-readable
    std::string prefix;    // "model.layers.0.self_attn.q_proj"
    int64_t groupSize = 0; // input columns per group (in when one per output)
  };
  // q, zero point and scale of every (output, group) as read from the stored words.
  struct Unpacked {
    std::vector<uint8_t> q;       // [out][in]
    std::vector<uint8_t> zeros;   // [out][groups]
    std::vector<uint16_t> scales; // [out][groups], fp16 bits
  };
  Result<Unpacked> unpack(const Linear &linear) const;
  Status addLinear(const std::string &prefix);

  HfQuantization quantization_;
  std::map<std::string, Linear> linears_; // by weight name
};

} // namespace kiln::compiler
