#include "runtime/exec/op_cost.h"

#include "runtime/ops/op_table.h"

namespace kiln::rt {

std::vector<SequenceShape> sequenceShapes(const StepBatch &batch) {
  std::vector<SequenceShape> shapes;
  for (const SequenceStep &s : batch.sequences) {
    const auto tokens = static_cast<int32_t>(s.tokenIds.size());
    shapes.push_back({tokens, s.startPosition + tokens});
  }
  return shapes;
}

OpCost estimateOpCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                      const StepCounts &counts, std::span<const SequenceShape> sequences,
                      const schema::KvCacheSpec &kv) {
  const OpCostInputs inputs{op, buffers, counts, sequences, kv};
  const OpEntry *entry = findOp(op.params_type());
  return entry && entry->cost ? entry->cost(inputs) : everyBufferCost(inputs);
}

} // namespace kiln::rt
