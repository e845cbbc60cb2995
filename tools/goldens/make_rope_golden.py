#!/usr/bin/env python3
"""Writes tests/data/golden/rope_inv_freq.json: RoPE inverse frequencies from Hugging Face
transformers (the models' rotary embedding classes, i.e. the ROPE_INIT_FUNCTIONS the models
themselves use) for a few configs, so kiln's rope tables (compiler/import/rope_scaling.h) are
checked against the reference without torch in CI.

The first cases (CASES: default and llama3 on LlamaRotaryEmbedding) are unchanged since the file
was first written. SCALED_CASES add every other scaling type from a config.json-style dict
("config" in the output, what kiln parses): linear, dynamic, yarn and longrope, partial rotary
among them. For each, "inv_freq" is the row at construction (longrope: the short factors'; dynamic:
the unscaled one), "attention_scaling" the factor cos and sin are multiplied by, and
"at_seq_len" the inv_freq the rotary embedding's forward uses for a sequence of seq_len tokens
(a fresh module run on position_ids [[seq_len - 1]], so transformers' dynamic update sees
max(position_ids) + 1 = seq_len): longrope on both sides of its switch, dynamic below and above
max_position_embeddings.

Run: /opt/kiln-venv/bin/python tools/goldens/make_rope_golden.py [OUT.json]
"""
import json
import os
import sys

import torch
import transformers
from transformers import LlamaConfig, Phi3Config
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

LLAMA3 = "llama3"

# (name, rope_theta, head_dim, rope scaling or None)
CASES = [
    ("default_theta1e4_dim8", 10000.0, 8, None),
    ("default_theta1e4_dim16", 10000.0, 16, None),
    ("default_theta5e5_dim128", 500000.0, 128, None),
    ("default_theta1e6_dim128", 1000000.0, 128, None),
    ("llama3_theta5e5_dim32_factor8", 500000.0, 32,
     {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ("llama3_theta5e5_dim64_factor32", 500000.0, 64,
     {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ("llama3_theta5e5_dim128_factor8", 500000.0, 128,
     {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ("llama3_theta1e4_dim64_factor16_orig4096", 10000.0, 64,
     {"factor": 16.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
      "original_max_position_embeddings": 4096}),
]


def inverse_frequencies(theta, head_dim, scaling):
    heads = 4
    params = {"rope_type": "default", "rope_theta": theta}
    if scaling is not None:
        params = {"rope_type": LLAMA3, "rope_theta": theta, **scaling}
    config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                         head_dim=head_dim, max_position_embeddings=131072,
                         rope_parameters=params)
    rotary = LlamaRotaryEmbedding(config)
    assert rotary.inv_freq.dtype == torch.float32
    return [float(x) for x in rotary.inv_freq.tolist()]


# Synthetic longrope factors (Phi-3's run from 1 to ~1.2 short and 1 to ~50 long).
def short_factors(n):
    return [round(1.0 + 0.2 * i / n, 4) for i in range(n)]


def long_factors(n):
    return [round(1.0 + 49.0 * (i / n) ** 2, 4) for i in range(n)]


# (name, model, config.json fields, seq_lens to run the forward at). "llama" builds LlamaConfig and
# LlamaRotaryEmbedding, "phi3" Phi3Config and Phi3RotaryEmbedding (longrope's home, where a
# top-level original_max_position_embeddings takes precedence). hidden_size = 4 * head_dim.
SCALED_CASES = [
    ("linear_theta1e4_dim64_factor4", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 4096,
      "rope_scaling": {"type": "linear", "factor": 4.0}}, []),
    ("linear_theta1e6_dim128_partial0.5_factor2.5", "llama",
     {"head_dim": 128, "rope_theta": 1000000.0, "max_position_embeddings": 4096,
      "partial_rotary_factor": 0.5, "rope_scaling": {"rope_type": "linear", "factor": 2.5}}, []),
    ("default_theta1e4_dim128_partial0.75_phi3", "phi3",
     {"head_dim": 128, "rope_theta": 10000.0, "max_position_embeddings": 4096,
      "partial_rotary_factor": 0.75}, []),
    ("dynamic_theta1e4_dim64_factor2_max2048", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 2048,
      "rope_scaling": {"type": "dynamic", "factor": 2.0}},
     [1000, 2048, 2049, 2050, 3000, 4096, 8191, 65536]),
    ("dynamic_theta5e5_dim128_factor1.7_max4096", "llama",
     {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "dynamic", "factor": 1.7}},
     [4096, 4097, 5000, 12345, 131072]),
    ("dynamic_theta1e4_dim64_partial0.5_factor4_max1024", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 1024,
      "partial_rotary_factor": 0.5, "rope_scaling": {"type": "dynamic", "factor": 4.0}},
     [1024, 1025, 3000, 40000]),
    ("yarn_qwen25_theta1e6_dim128_factor4_orig32768", "llama",
     {"head_dim": 128, "rope_theta": 1000000.0, "max_position_embeddings": 131072,
      "rope_scaling": {"type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 32768}}, []),
    ("yarn_theta1e4_dim64_factor8_attention_factor", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 32768,
      "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "attention_factor": 0.8,
                       "original_max_position_embeddings": 4096}}, []),
    ("yarn_theta1e4_dim64_factor40_mscale", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 163840,
      "rope_scaling": {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                       "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1,
                       "original_max_position_embeddings": 4096}}, []),
    ("yarn_theta1e4_dim64_factor2_betas_untruncated", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "beta_fast": 64, "beta_slow": 2,
                       "truncate": False, "original_max_position_embeddings": 2048}}, []),
    ("yarn_theta5e5_dim128_partial0.5_factor4", "llama",
     {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 32768,
      "partial_rotary_factor": 0.5,
      "rope_scaling": {"type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 8192}}, []),
    ("longrope_phi3_mini_128k_dim96", "phi3",
     {"head_dim": 96, "rope_theta": 10000.0, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": short_factors(48),
                       "long_factor": long_factors(48)}},
     [100, 4096, 4097, 100000]),
    ("longrope_phi4_mini_dim128_partial0.75", "phi3",
     {"head_dim": 128, "rope_theta": 10000.0, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75,
      "rope_scaling": {"type": "longrope", "short_factor": short_factors(48),
                       "long_factor": long_factors(48)}},
     [4096, 4097]),
    ("longrope_llama_dim64_factor_and_attention_factor", "llama",
     {"head_dim": 64, "rope_theta": 10000.0, "max_position_embeddings": 16384,
      "rope_scaling": {"rope_type": "longrope", "short_factor": short_factors(32),
                       "long_factor": long_factors(32), "factor": 4.0,
                       "attention_factor": 1.1, "original_max_position_embeddings": 4096}},
     [4096, 4097, 16384]),
]

MODELS = {"llama": (LlamaConfig, LlamaRotaryEmbedding), "phi3": (Phi3Config, Phi3RotaryEmbedding)}


def scaled_case(name, model, fields, seq_lens):
    config_class, rotary_class = MODELS[model]
    heads = 4
    config_json = {"hidden_size": heads * fields["head_dim"], "num_attention_heads": heads,
                   **fields}
    if model == "phi3":  # Phi3Config derives head_dim from hidden_size / num_attention_heads
        config_json = {k: v for k, v in config_json.items() if k != "head_dim"}
    config = config_class.from_dict(json.loads(json.dumps(config_json)))
    rotary = rotary_class(config)
    assert rotary.inv_freq.dtype == torch.float32
    at_seq_len = []
    for seq_len in seq_lens:
        fresh = rotary_class(config)
        x = torch.zeros(1, 1, fields["head_dim"], dtype=torch.float32)
        fresh(x, torch.tensor([[seq_len - 1]]))
        at_seq_len.append({"seq_len": seq_len,
                           "inv_freq": [float(v) for v in fresh.inv_freq.tolist()]})
    return {
        "name": name,
        "model": model,
        "rope_theta": fields["rope_theta"],
        "head_dim": fields["head_dim"],
        "rope_scaling": fields.get("rope_scaling"),
        "config": dict(config_json, head_dim=fields["head_dim"]),
        "rope_parameters_seen": {k: v for k, v in config.rope_parameters.items()
                                 if k not in ("short_factor", "long_factor")},
        "rotary_dim": 2 * rotary.inv_freq.numel(),
        "attention_scaling": float(rotary.attention_scaling),
        "inv_freq": [float(x) for x in rotary.inv_freq.tolist()],
        "at_seq_len": at_seq_len,
    }


def main():
    default_out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden",
                               "rope_inv_freq.json")
    out = sys.argv[1] if len(sys.argv) > 1 else default_out
    cases = []
    for name, theta, head_dim, scaling in CASES:
        cases.append({
            "name": name,
            "rope_theta": theta,
            "head_dim": head_dim,
            "rope_scaling": None if scaling is None else {"rope_type": LLAMA3, **scaling},
            "inv_freq": inverse_frequencies(theta, head_dim, scaling),
        })
    for name, model, fields, seq_lens in SCALED_CASES:
        cases.append(scaled_case(name, model, fields, seq_lens))
    golden = {
        "generator": "tools/goldens/make_rope_golden.py",
        "source": "transformers LlamaRotaryEmbedding / Phi3RotaryEmbedding(config): inv_freq "
                  "(float32) at construction and after forward, attention_scaling",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "cases": cases,
    }
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
