#!/usr/bin/env python3
"""Goldens for KILN_CPU_ACTIVATIONS=int8 (kernels/cpu/activation_mode.h): the Q8_0 and Q4_0 GGUF
fixtures of make_gguf_goldens.py read by transformers (gguf-py dequantization), with the input of
every nn.Linear quantized first by the rule of kernels/cpu/linear_quant_int8.h, written here in
torch independently of kiln:
  per block of 32 columns, amax = max |x|; amax 0: x^ = 0; else d = amax / 127 and
  q = round-half-to-even(x * (127 / amax)) (each division and product rounded in fp32),
  x^ = d * q.
kiln's Linears with those weights multiply exactly these x^ (up to fp32 rounding of the sums),
so its int8 mode is checked against this within the usual 1e-4, except for rounding flips
(ROUNDING_FLIPS below).

Run from the repo root (needs torch, transformers, gguf):
  python tools/goldens/make_int8_activation_goldens.py

Outputs (formats in tests/data/README.md):
  tests/data/golden/<fixture>.gguf.int8-activations.json + .case<i>.logits.f32
CPU only, fp32, eager attention, fixed prompts.
"""

import importlib.metadata
import json
import os
import sys

import gguf
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf_goldens as mgg  # noqa: E402
import make_llama_goldens as mlg  # noqa: E402

# kiln's x and transformers' differ in their last bits before the quantizer (kiln's norms and
# attention sum in another order), so now and then a value lands on the other side of a rounding
# boundary: q moves by one, which moves that row's logits by up to ~0.06 here, and through the KV
# cache the rows after it. So up to half the rows of a pass may exceed 1e-4, none 0.1. (The fp32
# rows' logits differ from these by 0.05 to 0.2 on every row: no pass of them fits.)
ROUNDING_FLIPS = {"logits_max_abs": 0.1, "max_fraction_of_rows": 0.5}

# The GGUF fixtures whose 2-D weights kiln keeps as integers (Q8_0 -> Q8, Q4_0 -> Q4).
FIXTURES = ["tiny-llama", "tiny-qwen2-untied"]


def quantizedRows(x: torch.Tensor) -> torch.Tensor:
    """x^ of the rule above, per block of 32 of the last dimension, in fp32."""
    assert x.dtype == torch.float32 and x.shape[-1] % 32 == 0, (x.dtype, x.shape)
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    d = torch.where(amax > 0, amax / 127.0, torch.zeros_like(amax))
    q = torch.round(blocks * (127.0 / safe))
    assert float(q.abs().max()) <= 127.0
    return (d * q).reshape(x.shape)


def withInt8Rows(model) -> int:
    """Quantizes the input of every nn.Linear of `model`; returns how many."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(lambda _, args: (quantizedRows(args[0]),) + args[1:])
            count += 1
    return count


def main() -> None:
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    goldenDir = os.path.join(repo, "tests/data/golden")
    for fixture in FIXTURES:
        path = os.path.join(repo, "tests/data/gguf", f"{fixture}.gguf")
        reader = gguf.GGUFReader(path)
        types = sorted({t.tensor_type.name for t in reader.tensors if len(t.shape) == 2})
        model = mgg.loadGguf(path)
        linears = withInt8Rows(model)
        name = f"{fixture}.gguf.int8-activations"
        note = (f"tests/data/gguf/{fixture}.gguf (2-D weights {', '.join(types)}) read in fp32 by "
                "transformers (gguf-py dequantization), eager, CPU, with the input of each of its "
                f"{linears} nn.Linear modules quantized per block of 32 to int8 and back by "
                "tools/goldens/make_int8_activation_goldens.py (the rule of "
                "kernels/cpu/linear_quant_int8.h); kiln runs it with KILN_CPU_ACTIVATIONS=int8")
        mlg.goldenForModel(name, model, os.path.dirname(path),
                           os.path.relpath(path, repo), note,
                           [(ids, None) for ids in mgg.kPrompts], goldenDir)
        goldenPath = os.path.join(goldenDir, f"{name}.json")
        with open(goldenPath) as f:
            golden = json.load(f)
        golden["versions"]["gguf"] = importlib.metadata.version("gguf")
        golden["tolerance"]["rounding_flips"] = ROUNDING_FLIPS
        mlg.writeGoldenJson(goldenPath, golden)


if __name__ == "__main__":
    main()
