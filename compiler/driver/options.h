// Validation and defaulting of CompileOptions, split from the driver so it is testable without
// a checkpoint. Messages name the command-line flag (--max-batch, ...) and the limit.
#pragma once

#include "compiler/driver/compile.h"
#include "compiler/import/hf_config.h"
#include "runtime/base/quant_layout.h"

namespace kiln::compiler {

inline constexpr int64_t kMaxBatchLimit = 65536;
inline constexpr int64_t kMaxTokensPerStepLimit = 1 << 20;
inline constexpr int64_t kDefaultMaxSeqLen = 4096;
inline constexpr int64_t kDefaultMaxTokensPerStep = 2048;
// Logits rows beyond max_batch that a default plan keeps, so kiln verify's every-token logits come
// 64 prompt tokens per step instead of one sequence's max_batch.
inline constexpr int64_t kDefaultMaxLogitsPerStep = 64;
inline constexpr int64_t kMaxTp = 64;
inline constexpr int64_t kMaxGroupSize = 1 << 20;
inline constexpr int64_t kDefaultInt4GroupSize = 32;

// Checks everything that does not depend on the model (flags, dtype, targets, --tp range).
Status validateCompileFlags(const CompileOptions &options);
// Fills the model-dependent defaults (max_seq_len, max_tokens_per_step) and checks the flags
// against the model (--max-seq-len <= max_position_embeddings; --tp divides the head counts and
// intermediate_size). Calls validateCompileFlags.
Result<CompileOptions> resolveCompileOptions(const CompileOptions &options,
                                             const HfModelConfig &config);

} // namespace kiln::compiler
