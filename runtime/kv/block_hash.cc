#include "runtime/kv/block_hash.h"

#include "runtime/base/hash.h"

namespace kiln::rt {

BlockHash hashBlock(BlockHash parent, std::span<const int32_t> tokenIds) {
  uint64_t h = mix64(parent ^ (0x9e3779b97f4a7c15ull * (tokenIds.size() + 1)));
  for (int32_t id : tokenIds)
    h = mix64(h + 0x9e3779b97f4a7c15ull + static_cast<uint32_t>(id));
  return h;
}

BlockHash groupBlockHash(BlockHash hash, int32_t group) {
  return group == 0 ? hash : mix64(hash ^ (0xc2b2ae3d27d4eb4full * static_cast<uint32_t>(group)));
}

} // namespace kiln::rt
