// Where each layer's K and V live in the paged KV cache (plan.fbs "KV cache groups"): the plan's
// groups read once, checked, into per-layer group and storage slot.
#pragma once

#include "runtime/base/status.h"
#include "schema/plan_generated.h"

#include <cstdint>
#include <vector>

namespace kiln::rt {

struct KvLayout {
  std::vector<int32_t> groupWindows; // per group: its sliding window, 0 for full attention
  std::vector<uint32_t> groupOfLayer;
  std::vector<uint32_t> slotOfLayer; // K/V storage slot: the layer's index in its group
  uint32_t numSlots = 0;             // layers one block holds: the largest group's size
};

// The layout of `kv`; an error names the group and layer when a layer is in no group or in two,
// or a group is empty. A spec without groups is one full-attention group, layer l in slot l.
Result<KvLayout> kvLayoutOf(const schema::KvCacheSpec &kv);

} // namespace kiln::rt
