#include "runtime/exec/op_cost.h"

#include "runtime/artifact/artifact.h"

namespace kiln::rt {
namespace {

using schema::OpParams;

const BoundBuffer &input(const schema::Op &op, std::span<const BoundBuffer> buffers, uint32_t i) {
  return buffers[op.inputs()->Get(i)];
}

const BoundBuffer &output(const schema::Op &op, std::span<const BoundBuffer> buffers, uint32_t i) {
  return buffers[op.outputs()->Get(i)];
}

uint64_t rowBytes(const BoundBuffer &b) {
  return static_cast<uint64_t>(b.width) * dtypeSize(b.dtype);
}

// The buffer at this step's rows (weights and other fixed buffers whole).
uint64_t stepBytes(const BoundBuffer &b, const StepCounts &counts) {
  return static_cast<uint64_t>(counts.rows(b.rows, b.fixedRows)) * rowBytes(b);
}

OpCost everyBuffer(const schema::Op &op, std::span<const BoundBuffer> buffers,
                   const StepCounts &counts) {
  OpCost cost;
  for (uint32_t i = 0; i < op.inputs()->size(); ++i) {
    const BoundBuffer &in = input(op, buffers, i);
    cost.bytesRead += stepBytes(in, counts);
    if (in.kind == schema::BufferKind::Weight)
      cost.weightBytes += stepBytes(in, counts);
  }
  for (uint32_t i = 0; i < op.outputs()->size(); ++i)
    cost.bytesWritten += stepBytes(output(op, buffers, i), counts);
  return cost;
}

OpCost linearCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                  const StepCounts &counts) {
  OpCost cost = everyBuffer(op, buffers, counts);
  const BoundBuffer &x = input(op, buffers, 0), &w = input(op, buffers, 1);
  const auto rows = static_cast<uint64_t>(counts.rows(x.rows, x.fixedRows));
  cost.flops = 2 * rows * static_cast<uint64_t>(w.width) * static_cast<uint64_t>(w.fixedRows);
  return cost;
}

OpCost embeddingCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                     const StepCounts &counts) {
  OpCost cost;
  const BoundBuffer &ids = input(op, buffers, 0), &table = input(op, buffers, 1);
  cost.weightBytes = static_cast<uint64_t>(counts.numTokens) * rowBytes(table);
  cost.bytesRead = stepBytes(ids, counts) + cost.weightBytes;
  cost.bytesWritten = stepBytes(output(op, buffers, 0), counts);
  return cost;
}

uint64_t kvTokenBytes(uint32_t kvHeads, uint32_t headDim, const schema::KvCacheSpec &kv) {
  return 2ull * kvHeads * headDim * dtypeSize(kv.dtype()); // K and V
}

OpCost ropeKvWriteCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                       const StepCounts &counts, const schema::KvCacheSpec &kv) {
  OpCost cost = everyBuffer(op, buffers, counts);
  const auto *p = op.params_as_RopeKvWriteParams();
  cost.bytesWritten +=
      static_cast<uint64_t>(counts.numTokens) * kvTokenBytes(p->num_kv_heads(), p->head_dim(), kv);
  return cost;
}

OpCost attentionCost(const schema::Op &op, std::span<const BoundBuffer> buffers,
                     const StepCounts &counts, std::span<const SequenceShape> sequences,
                     const schema::KvCacheSpec &kv) {
  const auto *p = op.params_as_AttentionParams();
  OpCost cost;
  for (uint32_t i = 0; i < 4; ++i) // q, positions, query_start_loc, context_lens
    cost.bytesRead += stepBytes(input(op, buffers, i), counts);
  cost.bytesWritten = stepBytes(output(op, buffers, 0), counts);
  const uint64_t pairFlops = 4ull * p->num_heads() * p->head_dim(); // q.k and p.v
  for (const SequenceShape &s : sequences) {
    const auto context = static_cast<uint64_t>(s.contextLen);
    const uint64_t blocks = (context + kv.block_size() - 1) / kv.block_size();
    cost.bytesRead +=
        context * kvTokenBytes(p->num_kv_heads(), p->head_dim(), kv) + blocks * sizeof(int32_t);
    // Query i of n new tokens sees context - n + i + 1 positions.
    const auto n = static_cast<uint64_t>(s.newTokens);
    const uint64_t pairs = n * (context - n) + n * (n + 1) / 2;
    cost.flops += pairs * pairFlops;
  }
  return cost;
}

} // namespace

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
  switch (op.params_type()) {
  case OpParams::LinearParams:
    return linearCost(op, buffers, counts);
  case OpParams::EmbeddingParams:
    return embeddingCost(op, buffers, counts);
  case OpParams::RopeKvWriteParams:
    return ropeKvWriteCost(op, buffers, counts, kv);
  case OpParams::AttentionParams:
    return attentionCost(op, buffers, counts, sequences, kv);
  default:
    return everyBuffer(op, buffers, counts);
  }
}

} // namespace kiln::rt
