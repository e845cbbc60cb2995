#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu {
namespace {

// Runs fn(t, id, scratch) for every token whose id lies in this table's rows and zeroes the other
// tokens' output rows (+0.0 is all zero bits in every type); scratch is `scratchFloats` floats of
// the worker's own, or null.
template <typename Fn> void forEachToken(const EmbeddingArgs &args, size_t scratchFloats, Fn fn) {
  const int64_t hidden = args.hidden;
  const int64_t outBytes = elemBytes(args.outType);
  parallelRun(args.numTokens * hidden > 16384, [&](int worker, int workers) {
    float *scratch = scratchFloats ? threadScratch(scratchFloats) : nullptr;
    const IndexRange tokens = staticRange(args.numTokens, worker, workers);
    for (int64_t t = tokens.begin; t < tokens.end; ++t) {
      // 64-bit: id - vocabStart must not wrap for ids far outside this shard.
      const int64_t id = static_cast<int64_t>(args.tokenIds[t]) - args.vocabStart;
      if (id < 0 || id >= args.vocabSize)
        std::memset(static_cast<uint8_t *>(args.out) + t * hidden * outBytes, 0, hidden * outBytes);
      else
        fn(t, id, scratch);
    }
  });
}

// A quantized table (runtime/base/quant_layout.h): each row dequantized to its exact fp32 weights
// (linear_quant.h dequantizeRow), then rounded once to outType.
void embeddingQuant(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
  const QuantMatrix table = quantMatrixOf(args.table, args.quant, args.vocabSize, args.hidden);
  const bool direct = args.outType == ElemType::kF32;
  forEachToken(args, direct ? 0 : size_t(hidden), [&](int64_t t, int64_t id, float *row) {
    if (direct)
      return dequantizeRow(table, id, static_cast<float *>(args.out) + t * hidden);
    dequantizeRow(table, id, row);
    storeRun(row, hidden, args.out, args.outType, t * hidden);
  });
}

// Gemma's scaled rows: each row in fp32, times scale, rounded once to outType.
void embeddingScaled(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
  const bool quantized = args.quant.groupSize > 0;
  const QuantMatrix table = quantized
                                ? quantMatrixOf(args.table, args.quant, args.vocabSize, args.hidden)
                                : QuantMatrix{};
  forEachToken(args, size_t(hidden), [&](int64_t t, int64_t id, float *row) {
    if (quantized)
      dequantizeRow(table, id, row);
    else
      weightRunToF32(args.table, args.tableType, id * hidden, hidden, row);
    for (int64_t i = 0; i < hidden; ++i)
      row[i] *= args.scale;
    storeRun(row, hidden, args.out, args.outType, t * hidden);
  });
}

} // namespace

void embedding(const EmbeddingArgs &args) {
  if (args.scale != 1.0f)
    return embeddingScaled(args);
  if (args.quant.groupSize > 0) // tableType is not read
    return embeddingQuant(args);
  const int64_t hidden = args.hidden;
  // A table of another type than the output goes through fp32 (one rounding at most).
  const bool converts = args.tableType != args.outType && args.outType != ElemType::kF32;
  forEachToken(args, converts ? size_t(hidden) : 0, [&](int64_t t, int64_t id, float *row) {
    if (args.outType == ElemType::kF32)
      weightRunToF32(args.table, args.tableType, id * hidden, hidden,
                     static_cast<float *>(args.out) + t * hidden);
    else
      convertRun(args.table, args.tableType, id * hidden, args.out, args.outType, t * hidden,
                 hidden, row);
  });
}

} // namespace kiln::kernels::cpu
