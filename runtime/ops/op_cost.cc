#include "runtime/ops/op_cost.h"

#include "runtime/ops/plan_types.h"

namespace kiln::rt {

uint64_t rowBytes(const BoundBuffer &b) {
  if (isQuantDType(b.dtype) && b.fixedRows > 0) // a quantized matrix: its bytes per row
    return quantWeightSize(b.dtype, static_cast<uint64_t>(b.fixedRows),
                           static_cast<uint64_t>(b.width), static_cast<uint64_t>(b.groupSize))
               .bytes /
           static_cast<uint64_t>(b.fixedRows);
  return static_cast<uint64_t>(b.width) * dtypeSize(b.dtype);
}

uint64_t stepBytes(const BoundBuffer &b, const StepCounts &counts) {
  return static_cast<uint64_t>(counts.rows(b.rows, b.fixedRows)) * rowBytes(b);
}

OpCost everyBufferCost(const OpCostInputs &in) {
  OpCost cost;
  for (uint32_t i = 0; i < in.op.inputs()->size(); ++i) {
    const BoundBuffer &b = in.input(i);
    cost.bytesRead += stepBytes(b, in.counts);
    if (b.kind == schema::BufferKind::Weight)
      cost.weightBytes += stepBytes(b, in.counts);
  }
  for (uint32_t i = 0; i < in.op.outputs()->size(); ++i)
    cost.bytesWritten += stepBytes(in.output(i), in.counts);
  return cost;
}

uint64_t kvTokenBytes(uint32_t kvHeads, uint32_t headDim, const schema::KvCacheSpec &kv) {
  return 2ull * kvHeads * headDim * dtypeSize(kv.dtype()); // K and V
}

} // namespace kiln::rt
