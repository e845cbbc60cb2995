#!/usr/bin/env python3
"""fp8 checkpoints and their goldens: tiny-llama's linears quantized to float8 e4m3 with fp32
scales, written in the layouts transformers' FineGrainedFP8 linears (DeepSeek-V3's and the Qwen3
FP8 checkpoints') and llm-compressor's compressed-tensors (the FP8 checkpoints vLLM serves) use,
and transformers run in fp32 on the weights those layouts stand for.

Run from the repo root:  python tools/goldens/make_fp8_goldens.py
(needs numpy, torch, transformers, safetensors: /opt/kiln-venv or /opt/vllm-venv)

The layouts (compiler/import/hf_fp8_checkpoint.h reads them), w[o][k] the HF weight (out x in),
blocks of B0 outputs x B1 inputs (the whole dimension where a strategy says so):
  <linear>.weight            F8_E4M3 [out, in]
  <linear>.weight_scale_inv  (fp8) F32 [ceil(out / B0), ceil(in / B1)], weight_block_size [B0, B1]
  <linear>.weight_scale      (compressed-tensors) F32 [1] per tensor, [out, 1] per channel
  w[o][k] = float(weight[o][k]) * scale[o // B0][k // B1], one fp32 product.
Rounding (as the FP8 quantizers do): per block s = amax / 448 in fp32, weight = (w / s) cast to
torch.float8_e4m3fn (nearest even). The embedding, norms and lm_head stay fp32
(modules_to_not_convert / ignore).

Fixtures, tests/data/models/<name>/ (config.json with its quantization_config, the tokenizer
files, model.safetensors):
  tiny-llama-fp8          quant_method fp8, weight_block_size [48, 48]: partial blocks at the
                          edges of tiny-llama's 64- and 128-wide matrices (32-row k/v: one block)
  tiny-llama-fp8-block    quant_method fp8, weight_block_size [32, 64]: blocks that are whole
                          groups of kiln's layout, so kiln keeps these weights in fp8 (Q8F32)
  tiny-llama-fp8-tensor   compressed-tensors, strategy tensor (scale [1])
  tiny-llama-fp8-channel  compressed-tensors, strategy channel (scale [out, 1])
Goldens, tests/data/golden/<name>.json + .case<i>.logits.f32 (make_llama_goldens.py's format): the
fp32 golden's prompts, 16 greedy ids and every row of logits, fp32, eager attention, CPU.
"""

import os
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()

FIXTURES = [
    # name, quant_method, block [outputs, inputs] per scale (0: the whole dimension), the fp32
    # golden's cases used (per tensor, the one-token prompt's first greedy step is a near-tie)
    ("tiny-llama-fp8", "fp8", [48, 48], [0, 1, 2]),
    ("tiny-llama-fp8-block", "fp8", [32, 64], [0, 2]),
    ("tiny-llama-fp8-tensor", "compressed-tensors", [0, 0], [1, 2]),
    ("tiny-llama-fp8-channel", "compressed-tensors", [1, 0], [0, 1, 2]),
]


def quantize(w: torch.Tensor, block):
    """w [out, in] fp32 -> (e4m3 [out, in], scales fp32 [ceil(out/B0), ceil(in/B1)], the fp32
    weights they stand for)."""
    out, inFeatures = w.shape
    BLOCK = [block[0] or out, block[1] or inFeatures]
    rows, cols = -(-out // BLOCK[0]), -(-inFeatures // BLOCK[1])
    codes = torch.zeros(out, inFeatures, dtype=torch.float8_e4m3fn)
    scales = torch.zeros(rows, cols, dtype=torch.float32)
    values = torch.zeros(out, inFeatures, dtype=torch.float32)
    for r in range(rows):
        for c in range(cols):
            block = w[r * BLOCK[0]:(r + 1) * BLOCK[0], c * BLOCK[1]:(c + 1) * BLOCK[1]]
            s = (block.abs().max() / 448.0).to(torch.float32)
            q = (block / s).to(torch.float8_e4m3fn)
            codes[r * BLOCK[0]:(r + 1) * BLOCK[0], c * BLOCK[1]:(c + 1) * BLOCK[1]] = q
            scales[r, c] = s
            values[r * BLOCK[0]:(r + 1) * BLOCK[0], c * BLOCK[1]:(c + 1) * BLOCK[1]] = \
                q.to(torch.float32) * s
    return codes, scales, values


def quantizationConfig(method, block):
    if method == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": block, "modules_to_not_convert": ["lm_head"]}
    strategy = "tensor" if block == [0, 0] else "channel"
    weights = {"dynamic": False, "num_bits": 8, "observer": "minmax", "strategy": strategy,
               "symmetric": True, "type": "float"}
    activations = {"dynamic": True, "num_bits": 8, "observer": None, "strategy": "token",
                   "symmetric": True, "type": "float"}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": activations,
                                          "output_activations": None}},
            "ignore": ["lm_head"], "kv_cache_scheme": None, "quantization_status": "compressed"}


def writeFixture(name, method, block, source: str, repo: str):
    def quantizeLinear(prefix, w):
        codes, scales, values = quantize(w, block)
        if method == "fp8":
            stored = {f"{prefix}.weight_scale_inv": scales.contiguous()}
        elif block == [0, 0]:
            stored = {f"{prefix}.weight_scale": scales.reshape(1).contiguous()}
        else:
            stored = {f"{prefix}.weight_scale": scales.contiguous()}  # [out, 1]
        stored[f"{prefix}.weight"] = codes.contiguous()
        return stored, values
    return mlg.writeQuantizedFixture(name, source, repo, quantizationConfig(method, block),
                                     quantizeLinear, lambda t: t.contiguous(), save_file)


def main() -> None:
    repo = os.getcwd()
    goldenDir = os.path.join(repo, "tests/data/golden")
    source = os.path.join(repo, "tests/data/models/tiny-llama")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    prompts = mlg.tinyLlamaPrompts(goldenDir)
    for name, method, block, cases in FIXTURES:
        model, count = writeFixture(name, method, block, source, repo)
        per = {(0, 0): "tensor", (1, 0): "output channel"}.get(tuple(block),
                                                               f"{block[0]} x {block[1]} block")
        note = (f"tiny-llama's {count} linears quantized to float8 e4m3 with an fp32 scale per "
                f"{per} and written in the {method} layout by tools/goldens/make_fp8_goldens.py; "
                "golden computed in fp32 on the weights that layout stands for, eager attention, "
                "CPU")
        mlg.goldenForModel(name, model, os.path.join(repo, "tests/data/models", name),
                           f"tests/data/models/{name}", note, [prompts[i] for i in cases],
                           goldenDir)


if __name__ == "__main__":
    main()
