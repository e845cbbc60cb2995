// The tokenizer a GGUF file describes (tokenizer.ggml.* metadata, llama.cpp's key names), written
// as the Hugging Face files kiln's artifact carries: tokenizer.json, which runtime/text/tokenizer.h
// and HF `tokenizers` load, and tokenizer_config.json. The ids match transformers' own GGUF
// tokenizer (AutoTokenizer.from_pretrained(dir, gguf_file=...)); where transformers leaves a
// model's tokenizer.json behind (pre-tokenizers it does not map, llama-bpe's ignore_merges and
// BOS) kiln follows llama.cpp and the model's own tokenizer.json instead.
//
//   tokenizer.ggml.model "gpt2": byte-level BPE. Vocab from tokenizer.ggml.tokens (id = index),
//     merges from tokenizer.ggml.merges; tokenizer.ggml.pre picks the pre-tokenizer
//     (ggufPreTokenizerNames() lists the names kiln maps; any other is an error).
//   tokenizer.ggml.model "llama": sentencepiece BPE with byte fallback (<0xNN> tokens), merges
//     derived from tokenizer.ggml.scores as transformers derives them, Metaspace prefix space
//     from tokenizer.ggml.add_space_prefix (default true).
// Control tokens (token_type 3) become special added tokens, user-defined ones (4) plain added
// tokens; bos/eos/unk/pad are special. A BOS/EOS the file asks for (add_bos_token /
// add_eos_token) is added by tokenizer.json's post-processor. Special token ids outside the
// vocabulary are ignored, as llama.cpp ignores them. Plain C++ (no MLIR).
#pragma once

#include "compiler/import/gguf_file.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

struct GgufTokenizerFiles {
  std::string tokenizerJson;       // HF tokenizers format
  std::string tokenizerConfigJson; // special tokens, add_bos/eos_token, chat_template, ...
  int32_t bosTokenId = -1, padTokenId = -1;
  // tokenizer.ggml.eos_token_id, then eot_token_id and eom_token_id when present and different.
  std::vector<int32_t> eosTokenIds;
  bool addBos = false;
};

// Errors name the metadata key, e.g. "tokenizer.ggml.model 'rwkv' is not supported; kiln reads
// gpt2 and llama".
Result<GgufTokenizerFiles> convertGgufTokenizer(const GgufFile &gguf);

// The tokenizer.ggml.pre values a "gpt2" tokenizer may carry (a missing key means "default").
std::vector<std::string> ggufPreTokenizerNames();

} // namespace kiln::compiler
