// A plan op as a backend runs it: its buffers resolved to memory (BoundOp) and the counts of one
// step (StepCounts). Shared by the op table (runtime/ops/op_table.h), the backends
// (runtime/hal) and the executor (runtime/exec).
#pragma once

#include "schema/plan_generated.h"

#include <cstdint>
#include <vector>

namespace kiln::rt {

// The actual counts of one step; every buffer's dim 0 follows from these (plan.fbs RowScale).
struct StepCounts {
  int32_t numTokens = 0;
  int32_t numSeqs = 0;
  int32_t numLogits = 0;
  // Longest context of the step (GPU grid rules, split-K attention); an upper bound is allowed:
  // a decode step padded for a captured graph passes the compiled max_seq_len, so its grids do
  // not depend on the step's lengths.
  int32_t maxContextLen = 0;

  // Rows of a buffer with `rule` this step; `fixedRows` is its recorded shape[0].
  int64_t rows(schema::RowScale rule, int64_t fixedRows) const {
    switch (rule) {
    case schema::RowScale::Tokens:
      return numTokens;
    case schema::RowScale::Sequences:
      return numSeqs;
    case schema::RowScale::Logits:
      return numLogits;
    default:
      return fixedRows;
    }
  }
};

// A plan buffer resolved to device memory.
struct BoundBuffer {
  void *data = nullptr;
  schema::DType dtype = schema::DType::F32;
  schema::RowScale rows = schema::RowScale::Fixed;
  schema::BufferKind kind = schema::BufferKind::Activation;
  int64_t fixedRows = 0; // shape[0] as recorded (at the compiled maxima)
  int64_t width = 1;     // product of the trailing dims
  int64_t groupSize = 0; // a quantized weight's (Q8, Q4, Q4M, Q4Z) columns per scale; else 0
};

// The paged KV cache as ops see it: per layer, K and V of [numBlocks][kvHeads][blockSize][headDim],
// and the layer's scales (plan.fbs KvCacheSpec.k_scales / v_scales; 1 when the plan has none): k
// is stored as k / kScales[l] rounded to `dtype`, and read back widened times it.
struct KvCacheBinding {
  std::vector<void *> keys;
  std::vector<void *> values;
  std::vector<float> kScales; // empty, or one per layer
  std::vector<float> vScales;
  float kScale(uint32_t layer) const { return layer < kScales.size() ? kScales[layer] : 1.0f; }
  float vScale(uint32_t layer) const { return layer < vScales.size() ? vScales[layer] : 1.0f; }
  int32_t numBlocks = 0;
  int32_t blockSize = 0;
  schema::DType dtype = schema::DType::F32;
};

// One op of the step program with its buffers resolved, in the plan's input/output order.
struct BoundOp {
  const schema::Op *op = nullptr; // kind, params and name; lives in the artifact's plan
  std::vector<BoundBuffer> inputs;
  std::vector<BoundBuffer> outputs;
  const KvCacheBinding *kvCache = nullptr; // must outlive the prepared op
  // cpu: the op's weights in its kernel's own layout (OpEntry::packCpuWeights), owned by the
  // prepared op; null when the kernel reads them as stored.
  const void *cpuPackedWeights = nullptr;
};

} // namespace kiln::rt
