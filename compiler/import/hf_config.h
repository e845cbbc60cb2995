// Hugging Face config.json (+ generation_config.json) for the families kiln compiles.
// Plain C++ (no MLIR). Unsupported settings fail with an error naming the field.
#pragma once

#include "compiler/import/hf_quantization.h"
#include "compiler/import/rope_scaling.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

struct HfModelConfig {
  std::string modelType;    // "llama"
  std::string architecture; // architectures[0], e.g. "LlamaForCausalLM"
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0; // defaults to numHeads
  int64_t headDim = 0;    // defaults to hiddenSize / numHeads
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  std::optional<RopeScaling> ropeScaling; // rope_scaling.h; nullopt: unscaled ("default")
  double partialRotaryFactor = 1.0;       // partial_rotary_factor
  int64_t rotaryDim = 0; // int(headDim * partialRotaryFactor); 0 (a hand-built config): headDim
  bool tieWordEmbeddings = false;
  bool attentionBias = false;
  bool mlpBias = false;
  int64_t maxPositionEmbeddings = 2048;
  std::string torchDtype; // informational
  int32_t bosTokenId = -1;
  std::vector<int32_t> eosTokenIds; // union of config.json and generation_config.json, in order
  int32_t padTokenId = -1;
  // quantization_config: a GPTQ / AWQ checkpoint (hf_quantization.h); nullopt: unquantized.
  std::optional<HfQuantization> quantization;

  // Family features: the family's parseConfig sets them (compiler/models/<family>.cc), the
  // shared decoder blocks read them (compiler/models/decoder.h).
  bool qkvBias = false;                // q/k/v projections have biases
  bool oBias = false;                  // o_proj has a bias
  bool qkNorm = false;                 // per-head RMSNorm of q and k before rope (Qwen3)
  std::vector<int64_t> slidingWindows; // per layer, 0 = full attention; empty: all full
  // Gemma 2 (compiler/models/gemma2.cc).
  bool geluTanhMlp = false;     // GeGLU: gelu_pytorch_tanh(gate) * up, not SiLU
  bool normPlusOne = false;     // every RMSNorm scales by (1 + weight)
  bool sandwichNorms = false;   // norms after attention and around the MLP too (four a layer)
  bool scaleEmbeddings = false; // embeddings times sqrt(hidden_size), rounded to the dtype
  double attentionScale = 0;    // 0: 1 / sqrt(head_dim)
  double attnLogitSoftcap = 0;  // 0: none; else scores become tanh(s / c) * c
  double finalLogitSoftcap = 0; // 0: none; else logits become tanh(l / c) * c
  // Mixture-of-experts (Mixtral, Qwen3-MoE, Qwen2-MoE): numExperts > 0 makes a layer's MLP the
  // experts'.
  int64_t numExperts = 0;
  int64_t expertsPerToken = 0;    // num_experts_per_tok
  int64_t expertIntermediate = 0; // each expert's width
  bool renormalizeExperts = true; // the top-k probabilities divided by their sum
  // Qwen2-MoE: a shared expert of this width beside the routed ones, its output gated by
  // sigmoid(x . shared_expert_gate) and added; 0: none.
  int64_t sharedExpertIntermediate = 0;
  std::vector<bool>
      denseMlpLayers; // per layer: a dense MLP (intermediateSize) instead; empty: none
  // Gemma 3: sliding-window layers rotate with this base and no scaling (rope_local_base_freq);
  // 0: every layer rotates alike.
  double localRopeTheta = 0;
  // Encoders (compiler/models/encoder.h: BERT, XLM-RoBERTa).
  bool embeds = false;         // an embedding model: the step returns every token's hidden state
  double layerNormEps = 1e-12; // layer_norm_eps
  int64_t typeVocabSize = 0;   // type_vocab_size: token type 0's row is added to every token
  int64_t positionOffset = 0;  // position p reads row p + offset (XLM-R: pad_token_id + 1)
  // Rows of the learned position table: max_position_embeddings (XLM-R counts the offset in it),
  // or that + the offset (BART's table has 2 more rows).
  int64_t positionRows = 0;
  // Encoder-decoders (BART): the decoder's layers after numLayers encoder layers, its input the
  // tokens shifted right after decoder_start_token_id, embeddings times sqrt(hidden) when
  // scale_embedding.
  int64_t decoderLayers = 0;
  int32_t decoderStartTokenId = -1;
  bool scaleEmbeddingsExactly = false;
};

// Reads MODEL_DIR/config.json and, when present, MODEL_DIR/generation_config.json.
// `ropeTypeAliases`: the model family's other names for scaling types (rope_scaling.h).
// `configJson`, when given, is read instead of MODEL_DIR/config.json (a family's normalized
// text, compiler/models/model_family.h).
Result<HfModelConfig> loadHfModelConfig(const std::string &modelDir,
                                        const RopeTypeAliases &ropeTypeAliases = {},
                                        const std::string *configJson = nullptr);
// Parses config.json text (generation_config optional, "" when absent). `source` names the file
// in error messages.
Result<HfModelConfig> parseHfModelConfig(const std::string &configJson,
                                         const std::string &generationConfigJson,
                                         const std::string &source = "config.json",
                                         const RopeTypeAliases &ropeTypeAliases = {});

// The RoPE fields of `config` (rope_scaling.h), and the kernels' tables for them.
RopeConfig ropeConfig(const HfModelConfig &config);
RopeTables ropeTables(const HfModelConfig &config);
// inv_freq[i] for i < rotaryDim/2, exactly as transformers computes it at construction: the only
// row of a static rope (default, linear, yarn, llama3), the short row of longrope, dynamic's
// unscaled row; ropeTables says how the kernels switch rows and scale cos/sin.
std::vector<float> ropeInverseFrequencies(const HfModelConfig &config, int64_t rotaryDim);

} // namespace kiln::compiler
