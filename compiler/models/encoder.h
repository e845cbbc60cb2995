// Encoder-only models (BERT, XLM-RoBERTa) and BART's encoder-decoder (compiler/models/bart.cc: a
// decoder layer adds causal self-attention and cross-attention over the encoder's output, its
// input the tokens shifted right, plan.fbs ShiftedTokenIds): the kiln graph of one step that
// returns every wanted
// token's final hidden state (plan.fbs PlanOutput HiddenStates) instead of logits. Embeddings:
// word (+ token type 0's row, folded into the word table at compile time: transformers adds it
// first) + learned absolute positions, LayerNorm; each layer post-norm: bidirectional
// self-attention (attention reads the LastPositions step input: every query sees its whole
// sequence), LayerNorm(x + attention), LayerNorm(x + dense(gelu(dense(x)))). Keys and values go
// through the paged KV cache like a decoder's (rope_kv_write with inverse frequencies 0 rotates by
// angle 0: the identity), so a sequence must be computed in one step.
#pragma once

#include "compiler/models/model_family.h"

#include <string>

namespace kiln::compiler {

// Where an encoder's tensors are: "" for a bare BertModel / XLMRobertaModel checkpoint, "bert."
// or "roberta." when it was saved from a model with a head.
struct EncoderLayout {
  std::string prefix;
};

// `prefix` when the checkpoint holds `probe` under it (saved from a model with a head), else "".
EncoderLayout headPrefixLayout(const BuildOptions &options, const std::string &prefix,
                               const std::string &probe);

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildEncoder(mlir::MLIRContext &context,
                                                                const HfModelConfig &config,
                                                                const BuildOptions &options,
                                                                const EncoderLayout &layout);

// The keys BERT-like configs share: hidden_act gelu, absolute positions, layer_norm_eps,
// type_vocab_size. Refuses others naming the field.
Status readEncoderConfig(const ConfigFields &fields, HfModelConfig &config);

} // namespace kiln::compiler
