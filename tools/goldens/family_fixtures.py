"""Tiny random Mistral / Qwen2 / Qwen3 / Phi-3 / Gemma 2 / Gemma 3 / Mixtral / Qwen3-MoE /
Qwen2-MoE fixtures (HF model dirs) for kiln's import and end-to-end tests.

Used by make_family_goldens.py; not meant to be run on its own. Shares the Llama fixtures'
tokenizer, weight distribution and generation_config (llama_fixtures.py, imported, not copied).
config.json is written by hand with the key set a published checkpoint of each family has (the
transformers 4.x keys `rope_theta`, `rope_scaling`, `torch_dtype`), then the model is built from
that very file, so the weights and the file can never disagree. Everything is seeded.

Gemma 2's RMSNorm scales by (1 + weight), so its stored norm weights are the offset from 1
(FamilySpec.norm_center / norm_centers); its fixture also sets the embedding's std (embed_std).
Gemma 3 (family "gemma3": Gemma3ForCausalLM, model_type gemma3_text) has the same norms plus
q_norm / k_norm. Family "gemma3mm" is Gemma3ForConditionalGeneration (model_type gemma3): the same
text tower nested under text_config -- written sparse, as google/gemma-3-4b-it's is: only the keys
whose value differs from Gemma3TextConfig's defaults -- beside a tiny SigLIP vision tower and
projector (FamilySpec.outer) that kiln ignores; its goldens are the text-only logits.

The mixture-of-experts families ("mixtral": MixtralForCausalLM, "qwen3_moe": Qwen3MoeForCausalLM,
"qwen2_moe": Qwen2MoeForCausalLM) are built and seeded like the others. transformers 5 holds each
layer's experts fused (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]);
fx.initWeights draws those fused tensors, and save_pretrained writes them back in the per-expert
layout the published checkpoints use (Mixtral: block_sparse_moe.experts.N.w1/w2/w3 and
block_sparse_moe.gate; Qwen3-MoE and Qwen2-MoE: mlp.experts.N.gate_proj/up_proj/down_proj and
mlp.gate), checked by make_family_goldens.py. Qwen2-MoE's sparse blocks also hold a shared expert
(mlp.shared_expert.gate_proj/up_proj/down_proj, a SwiGLU MLP every token goes through) scaled by
sigmoid(mlp.shared_expert_gate(x)) ([1, hidden], no bias); fx.initWeights draws them (and the q/k/v
biases) N(0, 0.15) like every other matrix.
"""

import json
import os
import shutil
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM

import llama_fixtures as fx

kArchitectures = {"mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                  "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
                  "gemma2": "Gemma2ForCausalLM", "gemma3": "Gemma3ForCausalLM",
                  "gemma3mm": "Gemma3ForConditionalGeneration",
                  "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                  "qwen2_moe": "Qwen2MoeForCausalLM"}
# The families whose RMSNorms scale by (1 + weight) and whose config is Gemma-shaped
kGemmaFamilies = ("gemma2", "gemma3", "gemma3mm")
kGemma3Families = ("gemma3", "gemma3mm")
# The mixture-of-experts families (family == model_type for each)
kMoeFamilies = ("mixtral", "qwen3_moe", "qwen2_moe")

# Absent from the file (not null): the real checkpoint of the family has no such key.
kAbsent = object()


@dataclass
class FamilySpec:
    name: str
    family: str  # key of kArchitectures
    seed: int
    storage_dtype: torch.dtype
    num_layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int | None = None  # None: no head_dim key (derive hidden / heads)
    tied: bool = False
    rope_theta: float = 10000.0
    rope_scaling: object = kAbsent  # dict, None (written as null) or kAbsent (key left out)
    max_position: int = 256
    # family-specific keys, merged last (sliding_window, use_sliding_window, ...)
    extra: dict = field(default_factory=dict)
    # rope depends on the sequence length at run time: the golden rows come from prefill + one
    # forward per greedy token with the KV cache, not from one forward over the whole sequence
    incremental: bool = False
    # Weights as fx.initWeights draws them (same generator, order and draws) unless these are set:
    # stored norm weight = centre + N(0, fx.kNormStd), centre norm_center (1.0 as in
    # llama_fixtures; Gemma stores the offset from 1, its RMSNorm multiplies by 1 + weight) or
    # norm_centers[key], key the norm's name without "model.layers.N." and ".weight"
    # ("post_attention_layernorm", "model.norm"); the embedding's std embed_std (None:
    # fx.kWeightStd, as every other matrix)
    norm_center: float = 1.0
    norm_centers: dict = field(default_factory=dict)
    embed_std: float | None = None
    # gemma3mm only: the top-level keys of the multimodal config.json beside text_config
    # (vision_config, mm_tokens_per_image, boi / eoi / image token ids, eos_token_id)
    outer: dict = field(default_factory=dict)
    notes: str = ""
    exercises: str = ""


def _longropeFactors(seed: int, count: int) -> tuple[list[float], list[float]]:
    gen = torch.Generator().manual_seed(seed)
    # float32 round trip so the file holds exactly what transformers' float32 tensor holds
    short = (1.0 + 0.5 * torch.rand(count, generator=gen)).tolist()
    long = (1.0 + 7.0 * torch.rand(count, generator=gen)).tolist()
    return [round(x, 6) for x in short], [round(x, 6) for x in long]


kLongShort, kLongLong = _longropeFactors(4242, 6)  # rotary dim 12 (head_dim 16 x 0.75) / 2


# Gemma 3's 5 local : 1 global pattern over 6 layers (Gemma3TextConfig's default for
# sliding_window_pattern 6: layer i is full iff (i + 1) % 6 == 0)
kGemma3LayerTypes = ["sliding_attention"] * 5 + ["full_attention"]
kGemma3Extra = {
    "query_pre_attn_scalar": 24, "sliding_window": 6, "sliding_window_pattern": 6,
    "layer_types": kGemma3LayerTypes, "rope_local_base_freq": 10000,
    "attn_logit_softcapping": None, "final_logit_softcapping": None}
# Gemma 2's norm recipe: post-norm / final-norm multipliers well above 1 so the sublayer outputs
# outweigh the x8 tied embedding (else greedy mostly repeats the input id)
kGemma3NormCentres = {"post_attention_layernorm": 2.0, "post_feedforward_layernorm": 2.0,
                      "model.norm": 3.0}
kGemma3Notes = (
    "F32, tied, GQA 4q/2kv, explicit head_dim 32 (heads*head_dim 128 != hidden 64), 6 layers "
    "(0-4 sliding, 5 full), sliding_window 6, query_pre_attn_scalar 24 (scale 24^-0.5, not "
    "head_dim^-0.5), rope: global layer rope_theta 1e6 with linear factor 8 (rope_scaling), "
    "local layers rope_local_base_freq 1e4 unscaled; no soft-caps (both null); "
    "gelu_pytorch_tanh; stored "
    "norm weights (Gemma multiplies by 1 + w) input/pre_feedforward/q_norm/k_norm N(0, 0.1), "
    "post_attention/post_feedforward 2 + N(0, 0.1), model.norm 3 + N(0, 0.1); embedding "
    "N(0, 0.1) (x 8), other matrices N(0, 0.15)")
kGemma3Exercises = (
    "Gemma 3 import: embeddings x sqrt(64) = 8, four RMSNorms per layer plus per-head q_norm / "
    "k_norm (before rope), all scaling by 1 + weight, GeGLU with tanh GELU, attention scale "
    "query_pre_attn_scalar^-0.5, two ropes chosen per layer type (global: theta 1e6 / linear 8; "
    "local: theta 1e4), a window of 6 on layers 0-4 only, head_dim != hidden / heads, tied "
    "lm_head")

# Qwen3-30B-A3B's MoE keys, shrunk (its config.json: decoder_sparse_step 1, mlp_only_layers [],
# norm_topk_prob true, num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768,
# intermediate_size 6144); here layer 1 of 3 is listed in mlp_only_layers, so it is a dense SwiGLU
# MLP of intermediate_size between two sparse layers
kQwen3MoeExtra = {
    "decoder_sparse_step": 1, "mlp_only_layers": [1], "moe_intermediate_size": 48,
    "norm_topk_prob": True, "num_experts": 16, "num_experts_per_tok": 4}

# Qwen/Qwen1.5-MoE-A2.7B's MoE keys, shrunk (its config.json: decoder_sparse_step 1, no
# mlp_only_layers key, norm_topk_prob false, num_experts 60, num_experts_per_tok 4,
# moe_intermediate_size 1408, shared_expert_intermediate_size 5632, intermediate_size 5632); here
# decoder_sparse_step 2 makes layers 1 and 3 sparse and 0 and 2 dense SwiGLU MLPs of
# intermediate_size (mlp_only_layers left out, as there: Qwen2MoeConfig's default [])
kQwen2MoeExtra = {
    "decoder_sparse_step": 2, "moe_intermediate_size": 32, "norm_topk_prob": False,
    "num_experts": 8, "num_experts_per_tok": 4, "shared_expert_intermediate_size": 96}

kFixtures = [
    FamilySpec(
        name="tiny-mistral", family="mistral", seed=2001, storage_dtype=torch.float32,
        head_dim=32, rope_theta=1000000.0, extra={"sliding_window": 6},
        notes="F32, untied, GQA 4q/2kv, explicit head_dim 32 (heads*head_dim 128 != hidden 64), "
              "sliding_window 6",
        exercises="Mistral import; sliding-window attention narrower than the 20-token prompt "
                  "(prefill and decode both windowed); explicit head_dim"),
    FamilySpec(
        name="tiny-mistral-window20", family="mistral", seed=2103,
        storage_dtype=torch.bfloat16, num_layers=3, extra={"sliding_window": 20},
        notes="BF16, untied, GQA 4q/2kv, head_dim derived (16), 3 layers, sliding_window 20",
        exercises="a window longer than kiln's 16-token KV block and shorter than prompt + greedy "
                  "of the long case (36): eviction across a block boundary during decode"),
    FamilySpec(
        name="tiny-qwen2", family="qwen2", seed=2003, storage_dtype=torch.bfloat16, tied=True,
        rope_theta=1000000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        extra={"sliding_window": 8, "use_sliding_window": False, "max_window_layers": 1},
        notes="BF16, tied, GQA 4q/2kv, q/k/v biases N(0, 0.15), yarn (legacy `type` key, factor "
              "4, original 64), sliding_window 8 with use_sliding_window false",
        exercises="Qwen2 q/k/v biases (o_proj none); tied embeddings; yarn rope incl. its "
                  "attention factor 0.1 ln 4 + 1; the legacy `type` key; sliding_window present "
                  "but disabled by use_sliding_window false (an importer that applies it fails)"),
    FamilySpec(
        name="tiny-qwen2-untied", family="qwen2", seed=2204, storage_dtype=torch.float32,
        kv_heads=1, rope_scaling={"rope_type": "linear", "factor": 2.0},
        extra={"sliding_window": 256, "use_sliding_window": False, "max_window_layers": 2},
        notes="F32, untied, MQA 4q/1kv, q/k/v biases, linear rope factor 2",
        exercises="Qwen2 with MQA biases (k/v bias of one head); linear rope scaling"),
    FamilySpec(
        name="tiny-qwen2-dynamic", family="qwen2", seed=2305, storage_dtype=torch.float32,
        tied=True, max_position=12, rope_scaling={"rope_type": "dynamic", "factor": 2.0},
        extra={"sliding_window": 12, "use_sliding_window": False, "max_window_layers": 2},
        incremental=True,
        notes="F32, tied, GQA 4q/2kv, q/k/v biases, dynamic NTK rope factor 2, "
              "max_position_embeddings 12",
        exercises="dynamic NTK rope whose base grows with the sequence length at run time; the "
                  "7-token case crosses 12 while decoding, the 20-token case starts above it"),
    FamilySpec(
        name="tiny-qwen3", family="qwen3", seed=2006, storage_dtype=torch.float16, head_dim=32,
        rope_theta=1000000.0, rope_scaling=None,
        extra={"attention_bias": False, "sliding_window": None, "use_sliding_window": False,
               "max_window_layers": 2},
        notes="F16, untied, GQA 4q/2kv, explicit head_dim 32, q_norm/k_norm 1 + N(0, 0.1), "
              "attention_bias false",
        exercises="Qwen3 per-head RMSNorm of q and k (before rope), no biases, head_dim != "
                  "hidden / heads"),
    FamilySpec(
        name="tiny-qwen3-tied", family="qwen3", seed=2007, storage_dtype=torch.float32,
        num_layers=3, kv_heads=1, head_dim=16, tied=True, rope_theta=1000000.0,
        rope_scaling=None,
        extra={"attention_bias": False, "sliding_window": None, "use_sliding_window": False,
               "max_window_layers": 3},
        notes="F32, tied, MQA 4q/1kv, head_dim 16, 3 layers, q_norm/k_norm",
        exercises="Qwen3 with tied embeddings and MQA (one k_norm shared by all query heads)"),
    FamilySpec(
        name="tiny-phi3", family="phi3", seed=2008, storage_dtype=torch.float32, kv_heads=4,
        rope_scaling=None,
        extra={"sliding_window": 10, "original_max_position_embeddings": 256},
        notes="F32, untied, MHA 4q/4kv, fused qkv_proj and gate_up_proj, sliding_window 10, "
              "rope_scaling null, Phi-3-mini-4k key set (no head_dim)",
        exercises="Phi-3 fused projections (split q|k|v rows and gate|up rows); sliding window "
                  "10 narrower than the 20-token prompt"),
    FamilySpec(
        name="tiny-phi3-longrope", family="phi3", seed=2409, storage_dtype=torch.float32,
        tied=True, max_position=64,
        rope_scaling={"long_factor": kLongLong, "short_factor": kLongShort, "type": "longrope"},
        extra={"sliding_window": 64, "original_max_position_embeddings": 16,
               "partial_rotary_factor": 0.75},
        incremental=True,
        notes="F32, tied, GQA 4q/2kv, longrope (6 short factors in [1, 1.5], 6 long in [1, 8]), "
              "original_max_position_embeddings 16, max_position_embeddings 64, "
              "partial_rotary_factor 0.75 (rotary dim 12 of head_dim 16)",
        exercises="longrope: short factors while the sequence is <= 16 tokens, long ones after, "
                  "attention factor sqrt(1 + ln 4 / ln 16) on cos/sin; partial rotary (first 12 "
                  "of 16 dims rotated, Phi-4-mini style); Phi-3 GQA fused qkv"),
    FamilySpec(
        name="tiny-gemma2", family="gemma2", seed=2517, storage_dtype=torch.float32,
        num_layers=4, head_dim=32, tied=True, embed_std=0.1, norm_center=0.0,
        # larger post-norm / final-norm multipliers: the post-normed sublayer outputs outweigh
        # the x8 tied embedding (else greedy mostly repeats the input id) and the final logits
        # go well past the final cap
        norm_centers={"post_attention_layernorm": 2.0, "post_feedforward_layernorm": 2.0,
                      "model.norm": 3.0},
        extra={"query_pre_attn_scalar": 24, "sliding_window": 6,
               "attn_logit_softcapping": 2.5, "final_logit_softcapping": 5.0,
               "layer_types": ["sliding_attention", "full_attention",
                               "sliding_attention", "full_attention"]},
        notes="F32, tied, GQA 4q/2kv, explicit head_dim 32 (heads*head_dim 128 != hidden 64), "
              "4 layers sliding/full/sliding/full, sliding_window 6, query_pre_attn_scalar 24 "
              "(scale 24^-0.5, not head_dim^-0.5), attn_logit_softcapping 2.5, "
              "final_logit_softcapping 5.0, gelu_pytorch_tanh; stored norm weights (Gemma "
              "multiplies by 1 + w) input/pre_feedforward N(0, 0.1), post_attention/"
              "post_feedforward 2 + N(0, 0.1), model.norm 3 + N(0, 0.1); embedding N(0, 0.1) "
              "(x 8), other matrices N(0, 0.15); on the golden sequences the attention scores "
              "before the cap reach 3.17 x 2.5 (15.3% of the visible ones beyond it) and the "
              "final logits before the cap 2.71 x 5.0 (11.5% beyond it)",
        exercises="Gemma 2 import: embeddings x sqrt(64) = 8, four RMSNorms per layer (pre/post "
                  "attention, pre/post feed-forward) scaling by 1 + weight, GeGLU with tanh GELU, "
                  "attention scale query_pre_attn_scalar^-0.5, tanh soft-capping of attention "
                  "scores (before the mask) and of the final logits, a window of 6 on layers 0 and "
                  "2 only (layers 1 and 3 full), head_dim != hidden / heads, tied lm_head"),
    FamilySpec(
        name="tiny-gemma3", family="gemma3", seed=2619, storage_dtype=torch.float32,
        num_layers=6, head_dim=32, tied=True, embed_std=0.1, norm_center=0.0,
        rope_theta=1000000, rope_scaling={"factor": 8.0, "rope_type": "linear"},
        norm_centers=kGemma3NormCentres, extra=kGemma3Extra,
        notes="google/gemma-3-1b-it's key set plus rope_scaling and layer_types (written out, "
              "beside sliding_window_pattern 6); " + kGemma3Notes,
        exercises=kGemma3Exercises),
    FamilySpec(
        name="tiny-gemma3-mm", family="gemma3mm", seed=2727, storage_dtype=torch.float32,
        num_layers=6, head_dim=32, tied=True, embed_std=0.1, norm_center=0.0,
        rope_theta=1000000, rope_scaling={"factor": 8.0, "rope_type": "linear"},
        norm_centers=kGemma3NormCentres, extra=kGemma3Extra,
        # google/gemma-3-4b-it's top-level keys, shrunk: a 56 x 56 image is 4 x 4 patches of 14,
        # average-pooled 2 x 2 to mm_tokens_per_image 4 (as 64 x 64 -> 16 x 16 = 256 there);
        # the image ids sit at the end of the vocab, as there (inside the embedding table)
        outer={"boi_token_index": 509, "eoi_token_index": 510, "image_token_index": 508,
               "eos_token_id": fx.kEos, "initializer_range": 0.02, "mm_tokens_per_image": 4,
               "vision_config": {"hidden_size": 16, "image_size": 56, "intermediate_size": 32,
                                 "model_type": "siglip_vision_model", "num_attention_heads": 2,
                                 "num_hidden_layers": 1, "patch_size": 14,
                                 "vision_use_head": False}},
        notes="Gemma3ForConditionalGeneration (model_type gemma3, google/gemma-3-4b-it's key set): "
              "text_config is tiny-gemma3's text model (other seed) written sparse like 4b-it's "
              "(no rope_theta, rope_local_base_freq, sliding_window_pattern, layer_types, "
              "rms_norm_eps, hidden_activation...: Gemma3TextConfig's defaults give tiny-gemma3's "
              "values); vision tower SigLIP hidden 16, 1 layer, 2 heads, image 56, patch 14; "
              "projector to 4 tokens per image; " + kGemma3Notes,
        exercises="the text tower of a Gemma 3 vision-language checkpoint: config from "
                  "text_config with Gemma3TextConfig's defaults for missing keys, weights under "
                  "language_model.model.*, vision_tower.* and multi_modal_projector.* present but "
                  "unused; the golden is the text-only forward (no pixel_values), which equals "
                  "Gemma3ForCausalLM's on the same text weights"),
    FamilySpec(
        name="tiny-mixtral", family="mixtral", seed=2846, storage_dtype=torch.float32,
        rope_theta=1000000.0,
        extra={"intermediate_size": 96, "num_local_experts": 8, "num_experts_per_tok": 2},
        notes="mistralai/Mixtral-8x7B-Instruct-v0.1's key set; F32, untied, GQA 4q/2kv, head_dim "
              "derived (16), 2 layers, each a sparse MoE block: 8 SwiGLU experts of width 96 "
              "(intermediate_size), top-2 routing; rope_theta 1e6, sliding_window null, "
              "router N(0, 0.15) like every other matrix",
        exercises="Mixtral import: per-expert tensors block_sparse_moe.experts.N.w1 (gate) / w3 "
                  "(up) / w2 (down) and the router block_sparse_moe.gate; routing softmax over "
                  "the 8 router logits, top-2, the two weights renormalised to sum 1; the "
                  "weighted sum of the two experts' SwiGLU outputs"),
    FamilySpec(
        name="tiny-qwen3-moe", family="qwen3_moe", seed=2940,
        storage_dtype=torch.float32, num_layers=3, head_dim=32, rope_theta=1000000.0,
        rope_scaling=None, extra=kQwen3MoeExtra,
        notes="Qwen/Qwen3-30B-A3B's key set; F32, untied, GQA 4q/2kv, explicit head_dim 32 "
              "(heads*head_dim 128 != hidden 64), q_norm/k_norm 1 + N(0, 0.1), 3 layers: 0 and 2 "
              "sparse (16 SwiGLU experts of width 48 = moe_intermediate_size, top-4, "
              "norm_topk_prob true), 1 dense (mlp_only_layers [1]: SwiGLU of width 128 = "
              "intermediate_size); rope_theta 1e6, router N(0, 0.15)",
        exercises="Qwen3-MoE import: per-expert tensors mlp.experts.N.gate_proj / up_proj / "
                  "down_proj and the router mlp.gate on the sparse layers, mlp.gate_proj / "
                  "up_proj / down_proj on the dense one (which layers are sparse: not in "
                  "mlp_only_layers and (i + 1) % decoder_sparse_step == 0); routing softmax over "
                  "the 16 logits, top-4, renormalised to sum 1 (norm_topk_prob); Qwen3 q/k norms"),
    FamilySpec(
        name="tiny-qwen2-moe", family="qwen2_moe", seed=3017,
        storage_dtype=torch.float32, num_layers=4, rope_theta=1000000.0, extra=kQwen2MoeExtra,
        notes="Qwen/Qwen1.5-MoE-A2.7B's key set (no qkv_bias, head_dim, rope_scaling or "
              "mlp_only_layers key); F32, untied, GQA 4q/2kv, head_dim derived (16), q/k/v "
              "biases N(0, 0.15), 4 layers: 1 and 3 sparse (decoder_sparse_step 2: 8 SwiGLU "
              "experts of width 32 = moe_intermediate_size, top-4, norm_topk_prob false, plus a "
              "shared SwiGLU expert of width 96 = shared_expert_intermediate_size scaled by "
              "sigmoid(shared_expert_gate . x)), 0 and 2 dense (SwiGLU of width 128 = "
              "intermediate_size); rope_theta 1e6, sliding_window 32768 with use_sliding_window "
              "false; router and shared_expert_gate N(0, 0.15)",
        exercises="Qwen2-MoE import: Qwen2 q/k/v biases (o_proj none); per-expert tensors "
                  "mlp.experts.N.gate_proj / up_proj / down_proj and the router mlp.gate on the "
                  "sparse layers, plus mlp.shared_expert.gate_proj / up_proj / down_proj and "
                  "mlp.shared_expert_gate; mlp.gate_proj / up_proj / down_proj on the dense ones "
                  "(which layers are sparse: not in mlp_only_layers and (i + 1) % "
                  "decoder_sparse_step == 0); routing softmax over the 8 logits, top-4, the "
                  "softmax probabilities as weights (no renormalisation); the shared expert's "
                  "output times sigmoid(x . shared_expert_gate) added to the routed sum"),
]


# Gemma3TextConfig's defaults (transformers 4.50, which wrote the published Gemma 3 files; 5.24
# has the same, checked by make_family_goldens.py): google/gemma-3-4b-it's text_config names only
# the keys whose value differs from these (to_diff_dict), and so does tiny-gemma3-mm's.
kGemma3TextDefaults = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
    "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": 0,
    "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True, "rope_theta": 1000000.0,
    "attention_bias": False, "attention_dropout": 0.0, "query_pre_attn_scalar": 256,
    "sliding_window": 4096, "final_logit_softcapping": None, "attn_logit_softcapping": None,
    "cache_implementation": "hybrid", "rope_scaling": None, "rope_local_base_freq": 10000.0,
    "sliding_window_pattern": 6}


def gemma3LayerTypes(numLayers: int, pattern: int = 6) -> list[str]:
    """Gemma3TextConfig's layer_types when the file has none: full iff (i + 1) % pattern == 0."""
    return ["sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(numLayers)]


def gemma3TextConfigDict(spec: FamilySpec, transformersVersion: str) -> dict:
    """The text model's full config (tiny-gemma3's form) for a gemma3 or gemma3mm spec."""
    return configDict(FamilySpec(**{**spec.__dict__, "family": "gemma3"}), transformersVersion)


def sparseGemma3TextConfig(full: dict) -> dict:
    """text_config as google/gemma-3-4b-it writes it: model_type plus the keys whose value differs
    from Gemma3TextConfig's defaults (layer_types left out: the default pattern derives it)."""
    assert full["layer_types"] == gemma3LayerTypes(full["num_hidden_layers"],
                                                  full["sliding_window_pattern"])
    skip = {"architectures", "torch_dtype", "transformers_version", "layer_types"}
    text = {k: v for k, v in full.items()
            if k not in skip and (k not in kGemma3TextDefaults or kGemma3TextDefaults[k] != v)}
    return dict(sorted(text.items()))


def gemma3mmConfigDict(spec: FamilySpec, transformersVersion: str) -> dict:
    """google/gemma-3-4b-it's config.json, shrunk: top-level keys, sparse text_config and a tiny
    SigLIP vision_config."""
    cfg = {"architectures": [kArchitectures[spec.family]], "model_type": "gemma3",
           "text_config": sparseGemma3TextConfig(gemma3TextConfigDict(spec, transformersVersion)),
           "torch_dtype": fx.kDtypeNames[spec.storage_dtype],
           "transformers_version": transformersVersion}
    cfg.update(spec.outer)
    return dict(sorted(cfg.items()))


def configDict(spec: FamilySpec, transformersVersion: str) -> dict:
    """The config.json of a published checkpoint of the family, shrunk to fixture size."""
    if spec.family == "gemma3mm":
        return gemma3mmConfigDict(spec, transformersVersion)
    cfg = {
        "architectures": [kArchitectures[spec.family]],
        "attention_dropout": 0.0,
        "bos_token_id": fx.kBos,
        "eos_token_id": fx.kEos,
        "hidden_act": "gelu_pytorch_tanh" if spec.family in kGemmaFamilies else "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": spec.max_position,
        "model_type": spec.family,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.num_layers,
        "num_key_value_heads": spec.kv_heads,
        "rms_norm_eps": 1e-6 if spec.family in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe")
        + kGemmaFamilies
        else 1e-5,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": spec.tied,
        "torch_dtype": fx.kDtypeNames[spec.storage_dtype],
        "transformers_version": transformersVersion,
        "use_cache": True,
        "vocab_size": fx.kVocab,
    }
    if spec.family == "phi3":
        # Phi-3-mini-4k-instruct's keys (its auto_map / _name_or_path left out: no remote code)
        cfg.update({"attention_bias": False, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
                    "pad_token_id": fx.kEos})
    if spec.family == "gemma2":
        # google/gemma-2-2b's keys beyond the common ones (pad 0 as in Gemma: here <unk>);
        # transformers reads hidden_activation, hidden_act is the same value
        cfg.update({"attention_bias": False, "cache_implementation": "hybrid",
                    "hidden_activation": "gelu_pytorch_tanh", "pad_token_id": 0})
    if spec.family == "gemma3":
        # google/gemma-3-1b-it's keys (transformers 4.50): as Gemma 2's, model_type gemma3_text, no
        # hidden_act (only hidden_activation), rope_local_base_freq and sliding_window_pattern
        # (from extra); rope_scaling linear 8 as gemma-3-4b and larger have
        del cfg["hidden_act"]
        cfg.update({"attention_bias": False, "cache_implementation": "hybrid",
                    "hidden_activation": "gelu_pytorch_tanh", "model_type": "gemma3_text",
                    "pad_token_id": 0})
    if spec.family == "mixtral":
        # mistralai/Mixtral-8x7B-Instruct-v0.1's keys beyond the common ones (the expert count,
        # top-k and expert width come from extra)
        cfg.update({"output_router_logits": False, "router_aux_loss_coef": 0.02,
                    "sliding_window": None})
    if spec.family == "qwen3_moe":
        # Qwen/Qwen3-30B-A3B's keys beyond the common ones (the MoE shape comes from extra)
        cfg.update({"attention_bias": False, "max_window_layers": spec.num_layers,
                    "output_router_logits": False, "router_aux_loss_coef": 0.001,
                    "sliding_window": None, "use_sliding_window": False})
    if spec.family == "qwen2_moe":
        # Qwen/Qwen1.5-MoE-A2.7B's keys beyond the common ones (the MoE shape comes from extra);
        # no qkv_bias key (Qwen2MoeConfig's default true: q/k/v have biases), no attention_bias
        cfg.update({"max_window_layers": spec.num_layers, "output_router_logits": False,
                    "router_aux_loss_coef": 0.001, "sliding_window": 32768,
                    "use_sliding_window": False})
    if spec.head_dim is not None:
        cfg["head_dim"] = spec.head_dim
    if spec.rope_scaling is not kAbsent:
        cfg["rope_scaling"] = spec.rope_scaling
    cfg.update(spec.extra)
    return dict(sorted(cfg.items()))


def normKey(name: str) -> str:
    """"model.layers.3.post_attention_layernorm.weight" -> "post_attention_layernorm" (also under
    Gemma3ForConditionalGeneration's "model.language_model." for "model.")."""
    if name.startswith("model.language_model."):
        name = "model." + name[len("model.language_model."):]
    parts = name[:-len(".weight")].split(".")
    return ".".join(parts[3:] if parts[:2] == ["model", "layers"] else parts)


def normCenter(spec: FamilySpec, name: str) -> float:
    return spec.norm_centers.get(normKey(name), spec.norm_center)


def initWeights(spec: FamilySpec, model) -> None:
    """fx.initWeights (same generator, same order, same draws), with the norm centres and the
    embedding std of the spec. A vision tower (gemma3mm) gets LayerNorm weights 1 + N(0, 0.1)
    and N(0, 0.15) for everything else, drawn in the same sorted pass."""
    if spec.norm_center == 1.0 and not spec.norm_centers and spec.embed_std is None:
        fx.initWeights(model, spec.seed)
        return
    gen = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if name.startswith("model.vision_tower.") and "norm" in name \
                    and name.endswith(".weight"):
                param.copy_(1.0 + fx.kNormStd * noise)  # SigLIP LayerNorms: x * w + b
            elif name.endswith("norm.weight"):
                param.copy_(normCenter(spec, name) + fx.kNormStd * noise)
            elif name in ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight") \
                    and spec.embed_std is not None:
                param.copy_(spec.embed_std * noise)
            else:
                param.copy_(fx.kWeightStd * noise)


def writeConfigJson(path: str, cfg: dict) -> None:
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def writeFixture(spec: FamilySpec, modelDir: str, tok: Tokenizer,
                 transformersVersion: str) -> dict:
    if os.path.isdir(modelDir):
        shutil.rmtree(modelDir)
    os.makedirs(modelDir)
    cfg = configDict(spec, transformersVersion)
    configPath = os.path.join(modelDir, "config.json")
    writeConfigJson(configPath, cfg)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(modelDir),
                                             dtype=torch.float32).eval()
    initWeights(spec, model)
    model = model.to(spec.storage_dtype)
    model.save_pretrained(modelDir, safe_serialization=True)
    writeConfigJson(configPath, cfg)  # save_pretrained wrote the transformers 5 form over it
    fx.writeGenerationConfig(os.path.join(modelDir, "generation_config.json"),
                             transformersVersion)
    fx.writeTokenizer(modelDir, tok)
    return cfg
