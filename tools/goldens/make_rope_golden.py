#!/usr/bin/env python3
"""Writes tests/data/golden/rope_inv_freq.json: RoPE inverse frequencies from Hugging Face
transformers (LlamaRotaryEmbedding, i.e. the ROPE_INIT_FUNCTIONS the model itself uses) for a few
Llama configs, so kiln's ropeInverseFrequencies() is checked against the reference without torch
in CI.

Run: /opt/kiln-venv/bin/python tools/goldens/make_rope_golden.py [OUT.json]
"""
import json
import os
import sys

import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

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
    golden = {
        "generator": "tools/goldens/make_rope_golden.py",
        "source": "transformers LlamaRotaryEmbedding(config).inv_freq (float32)",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "cases": cases,
    }
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
