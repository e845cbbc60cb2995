// What one op of a step must move and compute at least: the bytes it reads and writes once each
// (weights whole, activations at the step's rows, the KV cache positions it touches) and its
// multiply-add flops. `kiln profile` divides them by measured op times to say how close each op
// runs to the device's bandwidth or tensor-core peak. Estimates of the minimum, not of what a
// kernel actually moves: a kernel that reads a buffer twice shows as a lower fraction.
#pragma once

#include "runtime/exec/step.h"
#include "runtime/hal/device.h"

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::rt {

// One sequence of a step as the cost model sees it.
struct SequenceShape {
  int32_t newTokens = 0;
  int32_t contextLen = 0; // positions in the cache after the step (start + new tokens)
};
std::vector<SequenceShape> sequenceShapes(const StepBatch &batch);

struct OpCost {
  uint64_t bytesRead = 0;
  uint64_t bytesWritten = 0;
  uint64_t flops = 0;       // 2 per multiply-add
  uint64_t weightBytes = 0; // the part of bytesRead that is weights
  uint64_t bytes() const { return bytesRead + bytesWritten; }
};

// `buffers` are the rank's bound buffers by plan index (Executor::buffers()).
//   Linear       x, W (+ bias) read, y written; 2 * rows * in * out flops
//   Embedding    the token ids and one table row per token read, y written
//   RopeKvWrite  qkv, positions, slots, inv_freq read; q and each token's K and V written
//   Attention    q, each sequence's K and V up to its context, its block table entries read, o
//                written; 4 * heads * head_dim flops per (query, cache position) pair
//   others       every input read and every output written at the step's rows
OpCost estimateOpCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                      const StepCounts &counts, std::span<const SequenceShape> sequences,
                      const schema::KvCacheSpec &kv);

} // namespace kiln::rt
