#!/usr/bin/env python3
"""GPTQ and AWQ fixtures and their goldens: tiny-llama's linears quantized to 4 bits, written in
each format's published layout, and transformers run in fp32 on the weights that layout stands for.

Run from the repo root:  python tools/goldens/make_gptq_awq_goldens.py
(needs numpy, torch, transformers, safetensors: /opt/kiln-venv or /opt/vllm-venv)

The layouts (as AutoGPTQ / GPTQModel and AutoAWQ write them; compiler/import/hf_quantized_checkpoint.h
reads them), 4-bit values in int32 words, value i of a word in bits 4i..4i+3, w[o][k] the HF
weight (out x in), g = k // group_size:
  GPTQ  qweight [in/8, out]: word [k//8][o] holds q[k][o] as value k % 8; qzeros [groups, out/8]:
        word [g][o//8] holds zero[g][o] - 1 (the original "gptq" checkpoint format) as value o % 8;
        scales [groups, out] fp16; g_idx [in] = k // group_size.
  AWQ   qweight [in, out/8]: word [k][o//8] holds q[k][o] as value j where o % 8 = ORDER[j],
        ORDER = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros [groups, out/8] packed the same way (zero as is);
        scales [groups, out] fp16.
  w[o][k] = scale[g][o] * (q[k][o] - zero[g][o]), exact in fp32.
Rounding (round to nearest from tiny-llama's fp32 weights, as GPTQ's and AWQ's quantizers do before
their error correction, which a fixture does not need): symmetric s = 2 * amax / 15, zero 8;
asymmetric s = (max(w, 0) - min(w, 0)) / 15, zero = round(-min(w, 0) / s); q = clip(round(w / s)
+ zero, 0, 15), s stored as fp16. The embedding, norms and lm_head stay fp32, as quantizers leave
them.

Fixtures, tests/data/models/<name>/ (config.json with its quantization_config, the tokenizer files,
model.safetensors):
  tiny-llama-gptq      GPTQ, sym, group_size 32 (kiln keeps it packed as Q4)
  tiny-llama-gptq-asym GPTQ, sym false, group_size -1 (one scale and zero per output)
  tiny-llama-awq       AWQ GEMM, group_size 64
Goldens, tests/data/golden/<name>.json + .case<i>.logits.f32 (make_llama_goldens.py's format): the
fp32 golden's prompts, 16 greedy ids and every row of logits, fp32, eager attention, CPU.
"""

import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()

ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
FIXTURES = [
    # name, method, sym, group_size (-1: per output)
    ("tiny-llama-gptq", "gptq", True, 32),
    ("tiny-llama-gptq-asym", "gptq", False, -1),
    ("tiny-llama-awq", "awq", False, 64),
]


def quantize(w: np.ndarray, sym: bool, groupSize: int):
    """w [out, in] -> q [in, out], zeros [groups, out], scales fp16 [groups, out]."""
    out, inFeatures = w.shape
    g = inFeatures if groupSize == -1 else groupSize
    groups = inFeatures // g
    q = np.zeros((inFeatures, out), np.int64)
    zeros = np.zeros((groups, out), np.int64)
    scales = np.zeros((groups, out), np.float16)
    for gi in range(groups):
        block = w[:, gi * g:(gi + 1) * g].astype(np.float32)  # [out, g]
        if sym:
            amax = np.abs(block).max(axis=1)
            s = (2 * amax / 15).astype(np.float32)
            z = np.full(out, 8, np.int64)
        else:
            lo, hi = np.minimum(block.min(axis=1), 0), np.maximum(block.max(axis=1), 0)
            s = ((hi - lo) / 15).astype(np.float32)
            z = np.clip(np.rint(-lo / np.where(s > 0, s, 1)), 0, 15).astype(np.int64)
        s16 = s.astype(np.float16)
        sf = s16.astype(np.float32)
        safe = np.where(sf > 0, sf, 1)
        qb = np.clip(np.rint(block / safe[:, None]) + z[:, None], 0, 15).astype(np.int64)
        q[gi * g:(gi + 1) * g, :] = qb.T
        zeros[gi] = z
        scales[gi] = s16
    return q, zeros, scales


def dequantize(q, zeros, scales, groupSize):
    inFeatures, out = q.shape
    g = inFeatures if groupSize == -1 else groupSize
    rows = np.arange(inFeatures) // g
    w = scales.astype(np.float32)[rows] * (q - zeros[rows]).astype(np.float32)  # [in, out]
    return np.ascontiguousarray(w.T)


def packGptq(q, zeros, scales, groupSize):
    inFeatures, out = q.shape
    qweight = np.zeros((inFeatures // 8, out), np.uint32)
    for i in range(8):
        qweight |= (q[i::8].astype(np.uint32) << (4 * i))
    stored = (zeros - 1).astype(np.uint32)  # the original "gptq" format
    qzeros = np.zeros((zeros.shape[0], out // 8), np.uint32)
    for i in range(8):
        qzeros |= stored[:, i::8] << (4 * i)
    g = inFeatures if groupSize == -1 else groupSize
    return {"qweight": qweight.view(np.int32), "qzeros": qzeros.view(np.int32),
            "scales": scales, "g_idx": (np.arange(inFeatures) // g).astype(np.int32)}


def packAwq(q, zeros, scales):
    def pack(values):  # [rows, out] -> [rows, out/8]
        words = np.zeros((values.shape[0], values.shape[1] // 8), np.uint32)
        for j in range(8):
            words |= values[:, ORDER[j]::8].astype(np.uint32) << (4 * j)
        return words.view(np.int32)
    return {"qweight": pack(q), "qzeros": pack(zeros), "scales": scales}


def writeFixture(name, method, sym, groupSize, source, repo):
    if method == "gptq":
        config = {"quant_method": "gptq", "bits": 4, "group_size": groupSize, "desc_act": False,
                  "sym": sym, "checkpoint_format": "gptq"}
    else:
        config = {"quant_method": "awq", "bits": 4, "group_size": groupSize, "zero_point": True,
                  "version": "gemm"}

    def quantizeLinear(prefix, w):
        q, zeros, scales = quantize(w.numpy(), sym, groupSize)
        parts = packGptq(q, zeros, scales, groupSize) if method == "gptq" else \
            packAwq(q, zeros, scales)
        stored = {f"{prefix}.{part}": np.ascontiguousarray(v) for part, v in parts.items()}
        return stored, dequantize(q, zeros, scales, groupSize)
    return mlg.writeQuantizedFixture(name, source, repo, config, quantizeLinear,
                                     lambda t: np.ascontiguousarray(t.numpy()), save_file)


def main() -> None:
    repo = os.getcwd()
    goldenDir = os.path.join(repo, "tests/data/golden")
    source = os.path.join(repo, "tests/data/models/tiny-llama")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    prompts = mlg.tinyLlamaPrompts(goldenDir)
    for name, method, sym, groupSize in FIXTURES:
        model, count = writeFixture(name, method, sym, groupSize, source, repo)
        note = (f"tiny-llama's {count} linears quantized to 4 bits ({method}, "
                f"{'symmetric' if sym else 'zero points'}, group_size {groupSize}) and written in "
                f"the {method} layout by tools/goldens/make_gptq_awq_goldens.py; golden computed "
                "in fp32 on the weights that layout stands for, eager attention, CPU")
        mlg.goldenForModel(name, model, os.path.join(repo, "tests/data/models", name),
                           f"tests/data/models/{name}", note, prompts, goldenDir)


if __name__ == "__main__":
    main()
