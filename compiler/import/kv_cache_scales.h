// Calibrated fp8 KV-cache scales a checkpoint stores (llm-compressor's kv_cache_scheme, as the FP8
// checkpoints transformers and vLLM read them): per decoder layer i the scalars
//   model.layers.<i>.self_attn.k_scale  and  model.layers.<i>.self_attn.v_scale
// (AutoFP8's older model.layers.<i>.self_attn.k_proj.output_scale / v_proj.output_scale alike).
// With `kiln compile --kv-dtype fp8` layer i's cache stores fp8(k / k_scale) and attention reads
// it back times k_scale (plan.fbs KvCacheSpec.k_scales / v_scales).
#pragma once

#include "compiler/import/checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

struct KvCacheScales {
  size_t tensors = 0;       // scale tensors found, over all layers
  std::vector<float> k, v;  // one per layer when every layer has both; else empty
  std::string firstMissing; // when some layers have them and others not: the first absent name
};

// The scales of layers [0, numLayers) of `checkpoint`. Fails naming the tensor when one is not a
// single finite positive F32 / F16 / BF16 value.
Result<KvCacheScales> findKvCacheScales(const Checkpoint &checkpoint, int64_t numLayers);

} // namespace kiln::compiler
