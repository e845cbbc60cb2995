// Encoders (BertModel, XLMRobertaModel) compiled and run on the cpu backend against transformers'
// goldens (tools/goldens/make_encoder_goldens.py, tests/data/golden/<fixture>.embed.json): every
// token's last hidden state within 1e-4, alone and batched with the other cases (batch
// invariance), and sentence-transformers' pooling (mean + Normalize for tiny-bert, CLS + Normalize
// for tiny-xlm-roberta) within 1e-4. A text pair's case runs with the golden's token type ids
// (BERT: 1 on the second text; the TokenTypeIds step input).
#pragma once

#include "compiler/driver/compile.h"

#include <string>

namespace kiln::e2e {

// Compiles fixture `name` with `options` (max batch 8, max length 128, 512 tokens a step set
// here) for `device` and checks it against tests/data/golden/<name>.embed.json: the hidden
// states of its `expectedCases` cases (single texts and text pairs) within the golden's tolerance,
// alone and batched together, and the pooled vectors.
void checkEncoder(const std::string &name, size_t expectedCases, const std::string &device,
                  compiler::CompileOptions options);

} // namespace kiln::e2e
