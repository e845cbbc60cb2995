// Which KV blocks a sliding-window layer still reads (plan.fbs "KV cache groups"): a query at
// position p sees positions max(0, p - W + 1)..p (kernels/cpu/kernels.h), so tokens computed from
// position `start` on never read a block whose positions all lie before start - W + 1.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::rt {

// A block-table entry a sequence no longer holds: before its sliding window.
inline constexpr int32_t kNoKvBlock = -1;

// The first block the tokens from position `start` on can read in a group with sliding window
// `window` (0: full attention, every block).
inline int32_t firstBlockInWindow(int32_t window, int32_t start, int32_t blockSize) {
  return window > 0 ? std::max(0, start - window + 1) / blockSize : 0;
}

} // namespace kiln::rt
