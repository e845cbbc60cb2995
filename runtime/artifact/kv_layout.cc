#include "runtime/artifact/kv_layout.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kiln::rt {

// More layers than any model has: a corrupt plan, refused before anything is sized from it.
constexpr uint32_t kMaxKvLayers = 1u << 16;

Result<KvLayout> kvLayoutOf(const schema::KvCacheSpec &kv) {
  const uint32_t numLayers = kv.num_layers();
  if (numLayers > kMaxKvLayers)
    return invalidArgument("kv_cache.num_layers " + std::to_string(numLayers) +
                           " is more than any model has (at most " + std::to_string(kMaxKvLayers) +
                           ")");
  KvLayout layout;
  if (!kv.groups() || kv.groups()->size() == 0) {
    layout.groupWindows = {0};
    layout.groupOfLayer.assign(numLayers, 0);
    for (uint32_t l = 0; l < numLayers; ++l)
      layout.slotOfLayer.push_back(l);
    layout.numSlots = numLayers;
    return layout;
  }
  constexpr uint32_t kUnset = std::numeric_limits<uint32_t>::max();
  layout.groupOfLayer.assign(numLayers, kUnset);
  layout.slotOfLayer.assign(numLayers, kUnset);
  for (uint32_t g = 0; g < kv.groups()->size(); ++g) {
    const schema::KvCacheGroup &group = *kv.groups()->Get(g);
    const std::string name = "kv_cache.groups[" + std::to_string(g) + "]";
    if (!group.layers() || group.layers()->size() == 0)
      return invalidArgument(name + " has no layers");
    if (group.sliding_window() > uint32_t(std::numeric_limits<int32_t>::max()))
      return invalidArgument(name + ".sliding_window " + std::to_string(group.sliding_window()) +
                             " is too large");
    layout.groupWindows.push_back(static_cast<int32_t>(group.sliding_window()));
    for (uint32_t i = 0; i < group.layers()->size(); ++i) {
      const uint32_t layer = group.layers()->Get(i);
      if (layer >= numLayers)
        return invalidArgument(name + " names layer " + std::to_string(layer) +
                               "; kv_cache.num_layers is " + std::to_string(numLayers));
      if (layout.groupOfLayer[layer] != kUnset)
        return invalidArgument(name + " names layer " + std::to_string(layer) +
                               ", already in kv_cache.groups[" +
                               std::to_string(layout.groupOfLayer[layer]) + "]");
      layout.groupOfLayer[layer] = g;
      layout.slotOfLayer[layer] = i;
    }
    layout.numSlots = std::max(layout.numSlots, group.layers()->size());
  }
  for (uint32_t l = 0; l < numLayers; ++l)
    if (layout.groupOfLayer[l] == kUnset)
      return invalidArgument("layer " + std::to_string(l) + " is in no kv_cache group");
  return layout;
}

} // namespace kiln::rt
