#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {

// A quantized table (runtime/base/quant_layout.h): each row dequantized to its exact fp32 weights
// (linear_quant.h dequantizeRow), then rounded once to outType.
void embeddingQuant(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
  const int64_t outBytes = elemBytes(args.outType);
  const QuantMatrix table = quantMatrixOf(args.table, args.quant, args.vocabSize, args.hidden);
  parallelRun(args.numTokens * hidden > 16384, [&](int worker, int workers) {
    float *row = args.outType == ElemType::kF32 ? nullptr : threadScratch(size_t(hidden));
    const IndexRange tokens = staticRange(args.numTokens, worker, workers);
    for (int64_t t = tokens.begin; t < tokens.end; ++t) {
      const int64_t id = static_cast<int64_t>(args.tokenIds[t]) - args.vocabStart;
      if (id < 0 || id >= args.vocabSize) {
        std::memset(static_cast<uint8_t *>(args.out) + t * hidden * outBytes, 0, hidden * outBytes);
      } else if (row == nullptr) {
        dequantizeRow(table, id, static_cast<float *>(args.out) + t * hidden);
      } else {
        dequantizeRow(table, id, row);
        storeRun(row, hidden, args.out, args.outType, t * hidden);
      }
    }
  });
}

// Gemma's scaled rows: each row in fp32, times scale, rounded once to outType.
void embeddingScaled(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
  const int64_t outBytes = elemBytes(args.outType);
  const QuantMatrix table = args.quant.groupSize > 0
                                ? quantMatrixOf(args.table, args.quant, args.vocabSize, args.hidden)
                                : QuantMatrix{};
  parallelRun(args.numTokens * hidden > 16384, [&](int worker, int workers) {
    float *row = threadScratch(size_t(hidden));
    const IndexRange tokens = staticRange(args.numTokens, worker, workers);
    for (int64_t t = tokens.begin; t < tokens.end; ++t) {
      const int64_t id = static_cast<int64_t>(args.tokenIds[t]) - args.vocabStart;
      if (id < 0 || id >= args.vocabSize) {
        std::memset(static_cast<uint8_t *>(args.out) + t * hidden * outBytes, 0, hidden * outBytes);
        continue;
      }
      if (args.quant.groupSize > 0)
        dequantizeRow(table, id, row);
      else
        weightRunToF32(args.table, args.tableType, id * hidden, hidden, row);
      for (int64_t i = 0; i < hidden; ++i)
        row[i] *= args.scale;
      storeRun(row, hidden, args.out, args.outType, t * hidden);
    }
  });
}

} // namespace

void embedding(const EmbeddingArgs &args) {
  if (args.scale != 1.0f)
    return embeddingScaled(args);
  if (args.quant.groupSize > 0) // tableType is not read
    return embeddingQuant(args);
  const int64_t hidden = args.hidden;
  const int64_t outBytes = elemBytes(args.outType);
  parallelRun(args.numTokens * hidden > 16384, [&](int worker, int workers) {
    // A table of another type than the output goes through fp32 (one rounding at most).
    float *row = args.tableType == args.outType || args.outType == ElemType::kF32
                     ? nullptr
                     : threadScratch(static_cast<size_t>(hidden));
    const IndexRange tokens = staticRange(args.numTokens, worker, workers);
    for (int64_t t = tokens.begin; t < tokens.end; ++t) {
      // 64-bit: id - vocabStart must not wrap for ids far outside this shard.
      const int64_t id = static_cast<int64_t>(args.tokenIds[t]) - args.vocabStart;
      if (id < 0 || id >= args.vocabSize) // +0.0 is all zero bits in every type
        std::memset(static_cast<uint8_t *>(args.out) + t * hidden * outBytes, 0, hidden * outBytes);
      else if (args.outType == ElemType::kF32)
        weightRunToF32(args.table, args.tableType, id * hidden, hidden,
                       static_cast<float *>(args.out) + t * hidden);
      else
        convertRun(args.table, args.tableType, id * hidden, args.out, args.outType, t * hidden,
                   hidden, row);
    }
  });
}

} // namespace kiln::kernels::cpu
