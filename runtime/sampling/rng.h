// A small, fully specified RNG (xoshiro256** seeded through splitmix64), so a seeded request draws
// the same numbers on every platform and standard library. One per sequence: its draws never
// depend on what else is batched.
#pragma once

#include <cstdint>

namespace kiln::rt {

class Rng {
public:
  explicit Rng(uint64_t seed) {
    for (uint64_t &s : state_)
      s = splitmix(seed);
  }

  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t &x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  uint64_t state_[4];
};

// The RNG of parallel sample `index` of a request seeded with `seed`: samples of one request draw
// independent streams, and sample 0 of a seeded request is the same whatever n is.
inline Rng rngForSample(uint64_t seed, int32_t index) {
  return Rng(seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(index)));
}

} // namespace kiln::rt
