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

// `hidden_act` must be silu (SiLU-gated MLP): every family built by buildDecoder.
Status requireSiluActivation(const ConfigFields &fields);

} // namespace kiln::compiler
