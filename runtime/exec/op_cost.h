// The profiler's cost estimate of one op of a step (kiln profile): each op's model lives in its
// op table entry (runtime/ops/op_table.h, OpCost and the defaults in runtime/ops/op_cost.h).
#pragma once

#include "runtime/exec/step.h"
#include "runtime/hal/device.h"
#include "runtime/ops/op_cost.h"

#include <span>
#include <vector>

namespace kiln::rt {

std::vector<SequenceShape> sequenceShapes(const StepBatch &batch);

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
