#!/usr/bin/env python3
"""Goldens for `kiln compile --quantize`: transformers on the weights that round-to-nearest
quantization gives, dequantized in numpy by the format's definition.

Run from the repo root:  python tools/goldens/make_quantize_goldens.py
(needs numpy, torch, transformers: /opt/kiln-venv or /opt/vllm-venv)

The formats (schema/plan.fbs DType Q8 / Q4, runtime/base/quant_layout.h) and the rounding
(compiler/import/quantized_matrix.h quantizeMatrix), all in float32 as written there:
  Q8, one scale per group:   s = fp16(amax / 127); q = clip(rint(w / s), -127, 127); w' = s * q
  Q4, one scale per group:   m = the group's value of largest magnitude (the first, sign kept);
                             s = fp16(m / -8); u = clip(floor(w / s + 8.5), 0, 15); w' = s * (u - 8)
  Q8F, one scale per group:  s = fp16(amax / 448); e = float8_e4m3fn(w / s) (torch's cast, round to
                             nearest even); w' = s * e
  (a zero scale gives w' = 0). Every matrix a linear or an embedding reads is quantized: the q, k,
v, o, gate, up and down projections, the embedding table and the lm_head (tied: the one table);
in a mixture-of-experts model also every expert's gate_up and down matrices, while the router
(mlp.gate) stays fp32 as kiln keeps it (transformers 5's stacked experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I]:
each expert's [out, in] matrix row by row, as kiln stores its experts). MoE fixtures run the plain
per-expert loop (make_family_goldens.loadModel), and their routing on the quantized weights must
keep the k-th router logit ahead of the (k+1)-th by make_family_goldens.kMinRouterGap on every
golden token, or the golden is refused.
w' is exact in fp32 (an fp16 scale times a small integer, or an fp8 value: 11 x 4 significant bits),
so kiln's kernels, which dequantize inside the dot product, multiply by the very same weights: only
the summation order differs.

Usage: make_quantize_goldens.py [fixture.mode ...]  (default: all below).

For each (fixture, mode) below: the fp32 golden's prompts (tests/data/golden/<fixture>.json), 16
greedy ids and every row of logits of one forward pass, fp32, eager attention, CPU, one thread,
written as tests/data/golden/<fixture>.<mode>.json + .case<i>.logits.f32 (the format of
make_llama_goldens.py) with the compile options kiln must be given in "compile".
"""

import json
import os
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_goldens as mfg  # noqa: E402
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()

# fixture, mode, --quantize, --group-size (0: one group per row)
GOLDENS = [
    ("tiny-llama", "int8", "int8", 0),
    ("tiny-llama-tied", "int4", "int4", 32),
    ("tiny-llama", "fp8", "fp8", 0),
    ("tiny-mixtral", "int8", "int8", 0),
    ("tiny-mixtral", "int4", "int4", 32),
]

MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
            "embed_tokens", "lm_head")
EXPERTS = ("experts.gate_up_proj", "experts.down_proj")  # [E, out, in]


def quantizeQ8(group: np.ndarray) -> np.ndarray:
    amax = np.float32(np.max(np.abs(group)))
    s = np.float32(np.float16(amax / np.float32(127)))
    if s == 0:
        return np.zeros_like(group)
    q = np.clip(np.rint(group / s), -127, 127).astype(np.float32)
    return s * q


def quantizeQ4(group: np.ndarray) -> np.ndarray:
    extreme = group[int(np.argmax(np.abs(group)))]
    s = np.float32(np.float16(np.float32(extreme) / np.float32(-8)))
    if s == 0:
        return np.zeros_like(group)
    u = np.clip(np.floor(group / s + np.float32(8.5)), 0, 15).astype(np.float32)
    return s * (u - np.float32(8))


def quantizeQ8F(group: np.ndarray) -> np.ndarray:
    amax = np.float32(np.max(np.abs(group)))
    s = np.float32(np.float16(amax / np.float32(448)))
    if s == 0:
        return np.zeros_like(group)
    # torch's float8_e4m3fn cast rounds to nearest even; w / s stays below 448.2 here (the fp16
    # scale rounds amax / 448 by at most 2^-11), where it and kiln's saturating cast agree.
    e = torch.from_numpy((group / s).astype(np.float32)).to(torch.float8_e4m3fn)
    return s * e.to(torch.float32).numpy()


def quantizeDequantize(w: np.ndarray, mode: str, groupSize: int) -> np.ndarray:
    rows, cols = w.shape
    groupSize = groupSize or cols
    fn = {"int8": quantizeQ8, "int4": quantizeQ4, "fp8": quantizeQ8F}[mode]
    out = np.empty_like(w)
    for r in range(rows):
        for g in range(0, cols, groupSize):
            out[r, g:g + groupSize] = fn(w[r, g:g + groupSize])
    return out


def quantizeModel(model, mode: str, groupSize: int) -> int:
    """Quantizes every eligible matrix in place; returns how many (an expert's matrix counts one)."""
    done, count = set(), 0
    for name, param in model.named_parameters(remove_duplicate=False):
        stacked = param.dim() == 3 and name.endswith(EXPERTS)
        if not stacked and (param.dim() != 2 or
                            not any(f".{m}." in f".{name}" for m in MATRICES)):
            continue
        if id(param) in done:  # a tied table is one tensor
            continue
        done.add(id(param))
        w = param.detach().to(torch.float32).numpy()
        q = (np.stack([quantizeDequantize(e, mode, groupSize) for e in w]) if stacked
             else quantizeDequantize(w, mode, groupSize))
        count += w.shape[0] if stacked else 1
        with torch.no_grad():
            param.copy_(torch.from_numpy(q))
    return count


def isMoe(modelDir: str) -> bool:
    return mfg.modelTypeOf(modelDir) in mfg.ff.kMoeFamilies


def checkRouting(model, modelDir: str, golden: dict) -> float:
    """The quantized model's routing on the golden sequences: transformers' choices equal a
    float64 re-computation (make_family_goldens.routingStats) and the k-th router logit leads the
    (k+1)-th by kMinRouterGap everywhere. Returns the smallest lead."""
    with open(os.path.join(modelDir, "config.json")) as f:
        cfg = json.load(f)
    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in golden["cases"]]
    stats = mfg.routingStats(model, seqs, cfg)
    gap = min(s["min_gap"] for s in stats["layers"].values())
    assert gap > mfg.kMinRouterGap, f"routing on the quantized weights too close to a tie: {gap}"
    return round(gap, 6)


def promptRowsDiff(goldenDir: str, fp32: dict, golden: dict) -> float:
    """How far quantization moved the prompt rows' logits (the test must tell the two apart)."""
    diff = 0.0
    for a, b in zip(fp32["cases"], golden["cases"]):
        rows, vocab = len(a["prompt_ids"]), fp32["vocab_size"]
        la = np.fromfile(os.path.join(goldenDir, a["logits_file"]), "<f4")[:rows * vocab]
        lb = np.fromfile(os.path.join(goldenDir, b["logits_file"]), "<f4")[:rows * vocab]
        diff = max(diff, float(np.max(np.abs(la - lb))))
    return round(diff, 6)


def main() -> None:
    repo = os.getcwd()
    goldenDir = os.path.join(repo, "tests/data/golden")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    wanted = set(sys.argv[1:])
    for fixture, mode, quantize, groupSize in GOLDENS:
        if wanted and f"{fixture}.{mode}" not in wanted:
            continue
        modelDir = os.path.join(repo, "tests/data/models", fixture)
        with open(os.path.join(goldenDir, f"{fixture}.json")) as f:
            fp32 = json.load(f)
        prompts = [(c["prompt_ids"], c.get("prompt_text")) for c in fp32["cases"]]
        model = mfg.loadModel(modelDir) if isMoe(modelDir) else mlg.loadModel(modelDir)
        count = quantizeModel(model, mode, groupSize)
        group = f"groups of {groupSize}" if groupSize else "one group per row"
        note = (f"weights quantized {quantize} ({group}) by round-to-nearest in numpy as "
                f"tools/goldens/make_quantize_goldens.py defines, {count} matrices, dequantized to "
                "fp32; golden computed in fp32, eager attention, CPU")
        name = f"{fixture}.{mode}"
        mlg.goldenForModel(name, model, modelDir, f"tests/data/models/{fixture}", note, prompts,
                           goldenDir)
        path = os.path.join(goldenDir, f"{name}.json")
        with open(path) as f:
            golden = json.load(f)
        golden["compile"] = {"quantize": quantize, "group_size": groupSize}
        golden["prompt_rows_max_abs_diff_from_fp32"] = promptRowsDiff(goldenDir, fp32, golden)
        if isMoe(modelDir):
            golden["min_router_gap"] = checkRouting(model, modelDir, golden)
        mlg.writeGoldenJson(path, golden)


if __name__ == "__main__":
    main()
