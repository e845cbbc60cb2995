// sentence-transformers' files beside a checkpoint (modules.json, 1_Pooling/config.json): how an
// embedding model turns a sequence's hidden states into one vector. Plain C++ (no MLIR).
#pragma once

#include "runtime/base/status.h"

#include <string>

namespace kiln::compiler {

struct SentencePooling {
  std::string mode;       // "cls", "mean", "max", "lasttoken"; "" when there is no Pooling module
  bool normalize = false; // a Normalize module follows (L2)
};

// Reads MODEL_DIR/modules.json and its Pooling module's config.json; no modules.json: no pooling.
// Refuses a pooling it cannot compute (several modes at once, weighted mean, mean_sqrt_len)
// naming the file and field.
Result<SentencePooling> readSentencePooling(const std::string &modelDir);

} // namespace kiln::compiler
