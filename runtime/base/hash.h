// Small non-cryptographic hashing shared by the runtime (block hashes, hash tables, test fakes).
#pragma once

#include <cstdint>

namespace kiln {

// splitmix64's finalizer: a cheap full-avalanche mix, so nearby keys land far apart.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

} // namespace kiln
