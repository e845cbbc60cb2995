#include "runtime/kv/block_hash.h"

namespace kiln::rt {
namespace {

// splitmix64's finalizer: a cheap full-avalanche mix, so nearby token ids land far apart.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

} // namespace

BlockHash hashBlock(BlockHash parent, std::span<const int32_t> tokenIds) {
  uint64_t h = mix64(parent ^ (0x9e3779b97f4a7c15ull * (tokenIds.size() + 1)));
  for (int32_t id : tokenIds)
    h = mix64(h + 0x9e3779b97f4a7c15ull + static_cast<uint32_t>(id));
  return h;
}

} // namespace kiln::rt
