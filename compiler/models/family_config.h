// Config readers more than one family shares (compiler/models/<family>.cc).
#pragma once

#include "compiler/import/config_fields.h"
#include "compiler/import/hf_config.h"

namespace kiln::compiler {

// `sliding_window` (a window in tokens, or null for full attention) for every layer: Mistral,
// Phi-3.
Status readSlidingWindowAllLayers(const ConfigFields &fields, HfModelConfig &config);

// Qwen2/Qwen3's per-layer attention kinds as transformers derives them: `layer_types`
// ("full_attention" / "sliding_attention" per layer) when given, else, with `use_sliding_window`,
// layers from `max_window_layers` on use `sliding_window`; otherwise every layer is full.
Status readQwenLayerWindows(const ConfigFields &fields, HfModelConfig &config);

// Qwen2-MoE / Qwen3-MoE's experts: `num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
// `norm_topk_prob` (default false), and which layers keep a dense MLP of intermediate_size:
// those in `mlp_only_layers` or whose index + 1 is not a multiple of `decoder_sparse_step`
// (transformers' Qwen3MoeDecoderLayer / Qwen2MoeDecoderLayer rule).
Status readQwenExperts(const ConfigFields &fields, HfModelConfig &config);

// `hidden_act` must be silu (SiLU-gated MLP): every family built by buildDecoder.
Status requireSiluActivation(const ConfigFields &fields);

// Gemma's attention kinds: `layer_types`, else every `pattern`th layer full and the others
// sliding with `sliding_window` (transformers' Gemma2Config: pattern 2; Gemma3TextConfig:
// `sliding_window_pattern`, default 6).
Status readGemmaLayerWindows(const ConfigFields &fields, int64_t pattern, HfModelConfig &config);

// A soft-capping field (attn_logit_softcapping, final_logit_softcapping): `fallback` when the key
// is absent (the config class's default), none (0) when it is null.
Status readSoftcap(const ConfigFields &fields, const std::string &key, double fallback,
                   double &out);

// What Gemma 2 and 3 share: GeGLU (hidden_activation gelu_pytorch_tanh), (1 + w) norms four a
// layer, scaled embeddings, query_pre_attn_scalar (default 256), tied embeddings by default.
Status readGemmaCommon(const ConfigFields &fields, HfModelConfig &config);

} // namespace kiln::compiler
