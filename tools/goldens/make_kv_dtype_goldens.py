#!/usr/bin/env python3
"""Goldens for `kiln compile --kv-dtype`: transformers' fp32 model with K and V rounded to the cache
dtype where kiln stores them.

Run from the repo root:  python tools/goldens/make_kv_dtype_goldens.py [--only NAME]
(NAME: one golden, e.g. tiny-llama-tied.kv-fp8-scaled)
(needs numpy, torch, transformers: /opt/kiln-venv or /opt/vllm-venv)

schema/plan.fbs "Dtypes": with fp32 activations and a half KV cache, RopeKvWrite rounds the rotated
k and the raw v to the cache dtype (round to nearest even) and attention reads them back widened;
q and everything else stay fp32. The reference does exactly that to transformers' fp32
LlamaForCausalLM: k after apply_rotary_pos_emb and the v_proj output are rounded to the dtype and
back (q untouched), in the prompt's forward pass and in generate's cached steps alike.

fp8-scaled: an fp8 cache with a checkpoint's calibrated per-layer scales (plan.fbs KvCacheSpec.
k_scales / v_scales; an llm-compressor kv_cache_scheme's k_scale / v_scale tensors). They are
calibrated here as llm-compressor does, the amax of each layer's k (after rotary) and v over the
golden's prompts divided by 448 (fp8's largest value), with 25% headroom for the generated
tokens, and rounded to fp32; the cache then holds k / k_scale rounded to fp8 (both in fp32) and
attention reads it back times k_scale. The golden records the scales ("kv_scales", by the tensor
names a checkpoint stores them under: the test adds them to a copy of the fixture) and how far
they move the logits from the unscaled fp8 golden's.

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

GOLDENS = [("tiny-llama", "bf16"), ("tiny-llama-tied", "fp16"), ("tiny-llama-tied", "fp8"),
           ("tiny-llama-tied", "fp8-scaled")]
# fp8: E4M3FN, torch's cast rounds to nearest even (kiln's per-tensor scale is 1; these k and v
# stay far below 448, where kiln saturates).
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn,
          "fp8-scaled": torch.float8_e4m3fn}
kFp8Max = 448.0
kHeadroom = 1.25


class RoundedCache:
    """While active: k after rotary and every v_proj output rounded to `dtype` and back; with
    per-layer `scales` ([(k_scale, v_scale)], fp32 values) divided by the layer's scale first and
    multiplied by it after, in fp32."""

    def __init__(self, model, dtype: torch.dtype, scales=None):
        self.model, self.dtype, self.scales, self.handles = model, dtype, scales, []
        self.layer = 0  # the layer whose attention runs now (apply_rotary_pos_emb has no layer)

    def round(self, t: torch.Tensor, which: int) -> torch.Tensor:
        if self.scales is None:
            return t.to(self.dtype).to(torch.float32)
        scale = torch.tensor(self.scales[self.layer][which], dtype=torch.float32)
        return (t / scale).to(self.dtype).to(torch.float32) * scale

    def __enter__(self):
        for index, layer in enumerate(self.model.model.layers):
            self.handles.append(layer.self_attn.register_forward_pre_hook(
                lambda m, a, kw, i=index: setattr(self, "layer", i), with_kwargs=True))
            self.handles.append(layer.self_attn.v_proj.register_forward_hook(
                lambda m, a, out: self.round(out, 1)))
        self.rotary = modeling_llama.apply_rotary_pos_emb

        def rotate(*args, **kwargs):
            q, k = self.rotary(*args, **kwargs)
            return q, self.round(k, 0)
        modeling_llama.apply_rotary_pos_emb = rotate
        return self

    def __exit__(self, *exc):
        modeling_llama.apply_rotary_pos_emb = self.rotary
        for handle in self.handles:
            handle.remove()


def calibratedScales(model, prompts) -> list:
    """Per layer (k_scale, v_scale): amax of k after rotary and of v over the prompts' forward
    passes, times kHeadroom / kFp8Max, rounded to fp32."""
    amax = [[0.0, 0.0] for _ in model.model.layers]
    state = {"layer": 0}
    handles = []
    for index, layer in enumerate(model.model.layers):
        handles.append(layer.self_attn.register_forward_pre_hook(
            lambda m, a, kw, i=index: state.update(layer=i), with_kwargs=True))

        def onV(m, a, out, i=index):
            amax[i][1] = max(amax[i][1], float(out.abs().max()))
        handles.append(layer.self_attn.v_proj.register_forward_hook(onV))
    rotary = modeling_llama.apply_rotary_pos_emb

    def rotate(*args, **kwargs):
        q, k = rotary(*args, **kwargs)
        amax[state["layer"]][0] = max(amax[state["layer"]][0], float(k.abs().max()))
        return q, k
    modeling_llama.apply_rotary_pos_emb = rotate
    try:
        with torch.no_grad():
            for ids, _ in prompts:
                model(torch.tensor([ids]))
    finally:
        modeling_llama.apply_rotary_pos_emb = rotary
        for handle in handles:
            handle.remove()
    return [tuple(float(np.float32(a * kHeadroom / kFp8Max)) for a in layer) for layer in amax]


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
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    for fixture, dtype in GOLDENS:
        if only and only != f"{fixture}.kv-{dtype}":
            continue
        modelDir = os.path.join(repo, "tests/data/models", fixture)
        with open(os.path.join(goldenDir, f"{fixture}.json")) as f:
            fp32 = json.load(f)
        prompts = [(c["prompt_ids"], c.get("prompt_text")) for c in fp32["cases"]]
        model = mlg.loadModel(modelDir)
        stored = dtype.split("-")[0]  # fp8-scaled: fp8
        note = (f"fp32 weights and activations; k after rotary and v rounded to {stored} where "
                "kiln stores them in its KV cache (tools/goldens/make_kv_dtype_goldens.py); golden "
                "computed in fp32, eager attention, CPU")
        name = f"{fixture}.kv-{dtype}"
        scales = calibratedScales(model, prompts) if dtype == "fp8-scaled" else None
        if scales:
            note += ("; the cache holds k / k_scale and v / v_scale rounded to fp8, read back "
                     "times the scale: per-layer scales calibrated on the prompts (amax x "
                     f"{kHeadroom} / {kFp8Max}), the checkpoint tensors of \"kv_scales\"")
        with RoundedCache(model, DTYPES[dtype], scales):
            mlg.goldenForModel(name, model, modelDir, f"tests/data/models/{fixture}", note,
                               prompts, goldenDir)
        path = os.path.join(goldenDir, f"{name}.json")
        with open(path) as f:
            golden = json.load(f)
        golden["compile"] = {"kv_dtype": "fp8" if scales else dtype}
        golden["rows_max_abs_diff_from_fp32"] = rowsDiff(goldenDir, fp32, golden)
        print(f"{name}: logits moved up to {golden['rows_max_abs_diff_from_fp32']} from fp32's")
        if scales:
            golden["kv_scales"] = {
                f"model.layers.{i}.self_attn.{which}_scale": layer[w]
                for i, layer in enumerate(scales) for w, which in enumerate(("k", "v"))}
            with open(os.path.join(goldenDir, f"{fixture}.kv-fp8.json")) as f:
                unscaled = json.load(f)
            golden["rows_max_abs_diff_from_unscaled_fp8"] = rowsDiff(goldenDir, unscaled, golden)
            print(f"{name}: scales {scales}; logits moved up to "
                  f"{golden['rows_max_abs_diff_from_unscaled_fp8']} from the unscaled fp8's")
        mlg.writeGoldenJson(path, golden)


if __name__ == "__main__":
    main()
