#include "kernels/cpu/kernels.h"
#include "kernels/cpu/weight_convert.h"

#include <algorithm>

namespace kiln::kernels::cpu {

void embedding(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
#pragma omp parallel for schedule(static) if (args.numTokens * hidden > 16384)
  for (int32_t t = 0; t < args.numTokens; ++t) {
    // 64-bit: id - vocabStart must not wrap for ids far outside this shard.
    const int64_t row = static_cast<int64_t>(args.tokenIds[t]) - args.vocabStart;
    float *out = args.out + t * hidden;
    if (row < 0 || row >= args.vocabSize)
      std::fill(out, out + hidden, 0.0f);
    else
      weightRunToF32(args.table, args.tableType, row * hidden, hidden, out);
  }
}

} // namespace kiln::kernels::cpu
