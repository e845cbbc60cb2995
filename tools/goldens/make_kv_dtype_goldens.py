#!/usr/bin/env python3
"""Goldens for `kiln compile --kv-dtype`: transformers' fp32 model with K and V rounded to the cache
dtype where kiln stores them.

Run from the repo root:  python tools/goldens/make_kv_dtype_goldens.py
(needs numpy, torch, transformers: /opt/kiln-venv or /opt/vllm-venv)

schema/plan.fbs "Dtypes": with fp32 activations and a half KV cache, RopeKvWrite rounds the rotated
k and the raw v to the cache dtype (round to nearest even) and attention reads them back widened;
q and everything else stay fp32. The reference does exactly that to transformers' fp32
LlamaForCausalLM: k after apply_rotary_pos_emb and the v_proj output are rounded to the dtype and
back (q untouched), in the prompt's forward pass and in generate's cached steps alike.

For each (fixture, dtype) below: the fp32 golden's prompts (tests/data/golden/<fixture>.json), 16
greedy ids and every row of logits of one forward pass, fp32, eager attention, CPU, one thread,
written as tests/data/golden/<fixture>.kv-<dtype>.json + .case<i>.logits.f32 (the format of
make_llama_goldens.py) with the compile options kiln must be given in "compile", and how far the
rounding moved the logits from the fp32 golden's ("rows_max_abs_diff_from_fp32": the test needs
it well above the tolerance to tell a rounded cache from an fp32 one).
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()

GOLDENS = [("tiny-llama", "bf16"), ("tiny-llama-tied", "fp16"), ("tiny-llama-tied", "fp8")]
# fp8: E4M3FN, torch's cast rounds to nearest even (kiln's per-tensor scale is 1; these k and v
# stay far below 448, where kiln saturates).
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


class RoundedCache:
    """While active: k after rotary and every v_proj output rounded to `dtype` and back."""

    def __init__(self, model, dtype: torch.dtype):
        self.model, self.dtype, self.handles = model, dtype, []

    def round(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dtype).to(torch.float32)

    def __enter__(self):
        for layer in self.model.model.layers:
            self.handles.append(layer.self_attn.v_proj.register_forward_hook(
                lambda m, a, out: self.round(out)))
        self.rotary = modeling_llama.apply_rotary_pos_emb

        def rotate(*args, **kwargs):
            q, k = self.rotary(*args, **kwargs)
            return q, self.round(k)
        modeling_llama.apply_rotary_pos_emb = rotate
        return self

    def __exit__(self, *exc):
        modeling_llama.apply_rotary_pos_emb = self.rotary
        for handle in self.handles:
            handle.remove()


def rowsDiff(goldenDir: str, fp32: dict, golden: dict) -> float:
    diff = 0.0
    for a, b in zip(fp32["cases"], golden["cases"]):
        if a["greedy_ids"] != b["greedy_ids"]:  # other ids: compare the prompt rows only
            rows = len(a["prompt_ids"])
        else:
            rows = a["logits_rows"]
        count = rows * fp32["vocab_size"]
        la = np.fromfile(os.path.join(goldenDir, a["logits_file"]), "<f4")[:count]
        lb = np.fromfile(os.path.join(goldenDir, b["logits_file"]), "<f4")[:count]
        diff = max(diff, float(np.max(np.abs(la - lb))))
    return round(diff, 6)


def main() -> None:
    repo = os.getcwd()
    goldenDir = os.path.join(repo, "tests/data/golden")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for fixture, dtype in GOLDENS:
        modelDir = os.path.join(repo, "tests/data/models", fixture)
        with open(os.path.join(goldenDir, f"{fixture}.json")) as f:
            fp32 = json.load(f)
        prompts = [(c["prompt_ids"], c.get("prompt_text")) for c in fp32["cases"]]
        model = mlg.loadModel(modelDir)
        note = (f"fp32 weights and activations; k after rotary and v rounded to {dtype} where kiln "
                "stores them in its KV cache (tools/goldens/make_kv_dtype_goldens.py); golden "
                "computed in fp32, eager attention, CPU")
        name = f"{fixture}.kv-{dtype}"
        with RoundedCache(model, DTYPES[dtype]):
            mlg.goldenForModel(name, model, modelDir, f"tests/data/models/{fixture}", note,
                               prompts, goldenDir)
        path = os.path.join(goldenDir, f"{name}.json")
        with open(path) as f:
            golden = json.load(f)
        golden["compile"] = {"kv_dtype": dtype}
        golden["rows_max_abs_diff_from_fp32"] = rowsDiff(goldenDir, fp32, golden)
        print(f"{name}: logits moved up to {golden['rows_max_abs_diff_from_fp32']} from fp32's")
        mlg.writeGoldenJson(path, golden)


if __name__ == "__main__":
    main()
