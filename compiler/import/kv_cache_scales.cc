#include "compiler/import/kv_cache_scales.h"

#include <cmath>

namespace kiln::compiler {
namespace {

// The stored name of layer `layer`'s scale of `which` ("k" or "v"), or "" when it has none.
std::string scaleName(const Checkpoint &checkpoint, int64_t layer, const std::string &which) {
  const std::string attention = "model.layers." + std::to_string(layer) + ".self_attn.";
  for (const std::string &name :
       {attention + which + "_scale", attention + which + "_proj.output_scale"})
    if (checkpoint.contains(name))
      return name;
  return "";
}

Result<float> readScale(const Checkpoint &checkpoint, const std::string &name) {
  KILN_ASSIGN_OR_RETURN(const TensorInfo *info, checkpoint.info(name));
  if (info->numElements() != 1)
    return invalidArgument("checkpoint: KV-cache scale '" + name + "' holds " +
                           std::to_string(info->numElements()) +
                           " values; a layer's k / v scale is one value");
  KILN_ASSIGN_OR_RETURN(std::vector<float> values, checkpoint.readF32(name));
  if (!(std::isfinite(values[0]) && values[0] > 0.0f))
    return invalidArgument("checkpoint: KV-cache scale '" + name + "' is " +
                           std::to_string(values[0]) + "; a scale must be finite and positive");
  return values[0];
}

} // namespace

Result<KvCacheScales> findKvCacheScales(const Checkpoint &checkpoint, int64_t numLayers) {
  KvCacheScales scales;
  std::vector<float> k, v;
  for (int64_t layer = 0; layer < numLayers; ++layer)
    for (const char *which : {"k", "v"}) {
      const std::string name = scaleName(checkpoint, layer, which);
      if (name.empty()) {
        if (scales.firstMissing.empty())
          scales.firstMissing =
              "model.layers." + std::to_string(layer) + ".self_attn." + which + "_scale";
        continue;
      }
      ++scales.tensors;
      KILN_ASSIGN_OR_RETURN(float value, readScale(checkpoint, name));
      (which[0] == 'k' ? k : v).push_back(value);
    }
  if (scales.tensors == size_t(2 * numLayers)) {
    scales.k = std::move(k);
    scales.v = std::move(v);
    scales.firstMissing.clear();
  }
  return scales;
}

} // namespace kiln::compiler
