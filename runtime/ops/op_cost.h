// What one op of a step must move and compute at least: the bytes it reads and writes once each
// (weights whole, activations at the step's rows, the KV cache positions it touches) and its
// multiply-add flops. `kiln profile` divides them by measured op times to say how close each op
// runs to the device's bandwidth or tensor-core peak. Estimates of the minimum, not of what a
// kernel actually moves: a kernel that reads a buffer twice shows as a lower fraction. Each op's
// model is part of its op table entry (runtime/ops/op_table.h); ops without one read every input
// and write every output once at the step's rows (everyBufferCost).
#pragma once

#include "runtime/ops/bound_op.h"

#include <cstdint>
#include <span>

namespace kiln::rt {

// One sequence of a step as the cost model sees it.
struct SequenceShape {
  int32_t newTokens = 0;
  int32_t contextLen = 0; // positions in the cache after the step (start + new tokens)
};

struct OpCost {
  uint64_t bytesRead = 0;
  uint64_t bytesWritten = 0;
  uint64_t flops = 0;       // 2 per multiply-add
  uint64_t weightBytes = 0; // the part of bytesRead that is weights
  uint64_t bytes() const { return bytesRead + bytesWritten; }
};

// What a cost model sees: the plan op, the rank's bound buffers by plan index, the step.
struct OpCostInputs {
  const schema::Op &op;
  std::span<const BoundBuffer> buffers;
  const StepCounts &counts;
  std::span<const SequenceShape> sequences;
  const schema::KvCacheSpec &kv;

  const BoundBuffer &input(uint32_t i) const { return buffers[op.inputs()->Get(i)]; }
  const BoundBuffer &output(uint32_t i) const { return buffers[op.outputs()->Get(i)]; }
};

// Bytes of `b` at this step's rows (weights and other fixed buffers whole).
uint64_t stepBytes(const BoundBuffer &b, const StepCounts &counts);
// Bytes of one row of `b`.
uint64_t rowBytes(const BoundBuffer &b);
// Every input read and every output written once at the step's rows.
OpCost everyBufferCost(const OpCostInputs &in);
// K and V bytes of one token in the cache.
uint64_t kvTokenBytes(uint32_t kvHeads, uint32_t headDim, const schema::KvCacheSpec &kv);

} // namespace kiln::rt
