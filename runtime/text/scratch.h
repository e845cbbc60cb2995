// The tokenizer's per-thread scratch buffers (thread_local vectors and strings reused across
// calls): reuse saves allocations in the hot loops, but a buffer keeps the capacity of the largest
// input its thread ever saw, and `kiln serve` encodes on hundreds of HTTP threads. A 3.5 MB prompt
// left about 80 MB behind on each thread that encoded one (found by scripts/soak.sh, see
// docs/reliability.md). A ScratchGuard, declared right after its buffer, frees the buffer when the
// call ends if it outgrew kScratchKeepBytes; smaller ones keep their capacity for the next call.
#pragma once

#include <cstddef>

namespace kiln::rt {

inline constexpr size_t kScratchKeepBytes = size_t(64) << 10;

template <typename Buffer> class ScratchGuard {
public:
  explicit ScratchGuard(Buffer &buffer) : buffer_(buffer) {}
  ~ScratchGuard() {
    if (buffer_.capacity() * sizeof(typename Buffer::value_type) > kScratchKeepBytes)
      Buffer().swap(buffer_);
  }
  ScratchGuard(const ScratchGuard &) = delete;
  ScratchGuard &operator=(const ScratchGuard &) = delete;

private:
  Buffer &buffer_;
};

} // namespace kiln::rt
