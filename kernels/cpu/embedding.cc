#include "kernels/cpu/kernels.h"
#include "kernels/cpu/weight_convert.h"

namespace kiln::kernels::cpu {

void embedding(const EmbeddingArgs &args) {
  const int64_t hidden = args.hidden;
#pragma omp parallel for schedule(static) if (args.numTokens * hidden > 16384)
  for (int32_t t = 0; t < args.numTokens; ++t)
    weightRunToF32(args.table, args.tableType, static_cast<int64_t>(args.tokenIds[t]) * hidden,
                   hidden, args.out + t * hidden);
}

} // namespace kiln::kernels::cpu
