#!/usr/bin/env python3
"""Writes the Hugging Face goldens kiln's --dtype bf16/fp16 artifacts are tested against.

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_half_goldens.py
Only some models (the others' goldens are left as they are):
                         ... make_half_goldens.py --only tiny-gemma2 [NAME ...]

Models (kModels): the Llama fixtures tiny-llama, tiny-llama-tied, tiny-llama3 (bf16, fp16);
the Gemma 2 fixture tiny-gemma2 (bf16 only; fp32 checkpoint); TinyStories-656K from
$KILN_ASSETS_DIR, default /work/shared/assets (bf16, fp16; absent assets are skipped with a
message). For each model and each of its dtypes, with transformers' AutoModelForCausalLM loading
the checkpoint with that torch dtype (every parameter cast, as `from_pretrained(dtype=...)` does),
on CPU, one thread, default attention (sdpa) for Llama, eager attention for Gemma 2 (its attention
logit soft-capping exists only there):
  - the prompts of the fp32 golden tests/data/golden/<model>.json (same cases, same order);
  - 16 greedy ids from model.generate (eos disabled, so always exactly 16);
  - ONE forward pass (no KV cache) over prompt + those ids in that dtype: every row of logits;
  - the fp32 model's forward over the same ids, to record how far the half model is from fp32;
  - for the Llama fixtures in bf16, the "kiln rounding" reference: the fp32 model rounding exactly where
    schema/plan.fbs says kiln does (class KilnRounding), over the same ids.

Outputs, in tests/data/golden/:
  <model>.<dtype>.json                 see the "format" field written into it
  <model>.<dtype>.case<i>.logits.<dtype>
  <model>.bf16.case<i>.kiln_rounding.f32  (Llama fixtures; the json omits kiln_rounding_file
                                           for the others)
The logits files are raw little-endian bf16 / fp16, rows x vocab_size, row-major: transformers'
half lm_head returns half logits, so storing them in that type loses nothing (the script checks).
Row r holds the logits after token r of prompt_ids + greedy_ids at position r.
"""

import argparse
import hashlib
import json
import os
import platform
import re
import sys

import numpy as np
import torch
import transformers
import tokenizers
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

transformers.logging.set_verbosity_error()

kNewTokens = 16
kDtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
# name -> (directory: "fixture" = tests/data/models/<name>, else relative to the assets dir,
#          dtypes, KilnRounding reference in bf16 (Llama only), attn_implementation or None).
kModels = {
    "tiny-llama": ("fixture", ["bf16", "fp16"], True, None),
    "tiny-llama-tied": ("fixture", ["bf16", "fp16"], True, None),
    "tiny-llama3": ("fixture", ["bf16", "fp16"], True, None),
    "tiny-gemma2": ("fixture", ["bf16"], False, "eager"),
    "tinystories-656K": ("models/tinystories-656K-hf", ["bf16", "fp16"], False, None),
}


def loadModel(modelDir: str, dtype: torch.dtype, attn: str | None = None):
    kwargs = {"attn_implementation": attn} if attn else {}
    model = AutoModelForCausalLM.from_pretrained(modelDir, dtype=dtype, **kwargs).eval()
    assert attn is None or model.config._attn_implementation == attn
    return model


def greedy(model, promptIds: list[int]) -> list[int]:
    # As make_llama_goldens.py: no eos at all, so exactly kNewTokens ids come back.
    model.generation_config.eos_token_id = None
    cfg = GenerationConfig(do_sample=False, max_new_tokens=kNewTokens, min_new_tokens=kNewTokens,
                           eos_token_id=None, pad_token_id=0, bos_token_id=1, num_beams=1,
                           temperature=None, top_p=None, top_k=None, repetition_penalty=None)
    inputs = torch.tensor([promptIds], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=cfg)
    ids = out[0, len(promptIds):].tolist()
    assert len(ids) == kNewTokens, ids
    return ids


def forward(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0]


class KilnRounding:
    """transformers' fp32 LlamaForCausalLM made to round where plan.fbs says kiln does ("Dtypes"):
    Linear and embedding weights stored in the dtype (norm weights stay fp32); every op computes in
    fp32 and rounds its output once: the norms' outputs, q/k/v (k and q again after rotary), the
    attention output, o_proj, gate/up, silu*up, down_proj, each residual sum; the logits stay fp32.
    transformers' half model rounds at more places (cos/sin, q*k^T, silu before the product, the
    norm before its weight, the logits), so kiln cannot match it closely; against this reference
    it must, which is what lets the kiln test catch a rounding bug."""

    def __init__(self, model: LlamaForCausalLM, dtype: torch.dtype):
        self.model, self.dtype, self.handles, self.residual = model, dtype, [], {}
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                    module.weight.copy_(self.round(module.weight))

    def round(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dtype).to(torch.float32)

    def hook(self, module, output=True, pre=False, fn=None):
        if pre:
            self.handles.append(module.register_forward_pre_hook(
                lambda m, args: (self.round(args[0]),) + tuple(args[1:])))
        elif fn is not None:
            self.handles.append(module.register_forward_hook(fn))
        else:
            self.handles.append(module.register_forward_hook(lambda m, a, out: self.round(out)))

    # The layer adds residual + x in fp32; returning round(residual + x) - residual (exact in fp32
    # for two half values) makes that sum the rounded one.
    def roundedSum(self, key):
        def fn(module, args, out):
            first = out[0] if isinstance(out, tuple) else out
            delta = self.round(self.residual[key] + first) - self.residual[key]
            return (delta,) + tuple(out[1:]) if isinstance(out, tuple) else delta
        return fn

    def stash(self, key):
        def fn(module, args, kwargs):
            self.residual[key] = args[0] if args else kwargs["hidden_states"]
        return fn

    def __enter__(self):
        m = self.model.model
        self.hook(m.embed_tokens)
        self.hook(m.norm)
        for i, layer in enumerate(m.layers):
            attn, mlp = layer.self_attn, layer.mlp
            for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj,
                           mlp.up_proj, mlp.down_proj):
                self.hook(linear)
            self.hook(attn.o_proj, pre=True)      # the attention output
            self.hook(mlp.down_proj, pre=True)    # silu(gate) * up
            self.hook(layer.input_layernorm)
            self.hook(layer.post_attention_layernorm)
            self.handles.append(layer.register_forward_pre_hook(self.stash((i, 0)),
                                                                with_kwargs=True))
            self.handles.append(layer.post_attention_layernorm.register_forward_pre_hook(
                self.stash((i, 1)), with_kwargs=True))
            self.hook(attn, fn=self.roundedSum((i, 0)))
            self.hook(mlp, fn=self.roundedSum((i, 1)))
        self.rotary = modeling_llama.apply_rotary_pos_emb
        modeling_llama.apply_rotary_pos_emb = \
            lambda *a, **k: tuple(self.round(t) for t in self.rotary(*a, **k))
        return self

    def __exit__(self, *exc):
        modeling_llama.apply_rotary_pos_emb = self.rotary
        for handle in self.handles:
            handle.remove()


def halfBytes(logits: torch.Tensor, dtype: torch.dtype) -> bytes:
    # The half model's logits are half values; check, then store their 16-bit patterns.
    assert logits.dtype == dtype or torch.equal(logits.to(dtype).float(), logits.float()), \
        "logits are not exactly representable in the model dtype"
    return logits.to(dtype).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def makeCase(name, dtypeName, index, promptIds, model, fp32Model, modelDir, goldenDir,
             withKilnRounding):
    dtype = kDtypes[dtypeName]
    ids = greedy(model, promptIds)
    logits = forward(model, promptIds + ids)
    reference = forward(fp32Model, promptIds + ids).float().numpy()
    values = logits.float().numpy()
    p = len(promptIds)
    margins, forwardAgrees = [], 0
    for k, tok in enumerate(ids):
        row = values[p - 1 + k]
        top2 = np.sort(row)[-2:]
        margins.append(float(top2[1] - top2[0]))
        forwardAgrees += int(np.argmax(row)) == tok
    fileName = f"{name}.{dtypeName}.case{index}.logits.{dtypeName}"
    data = halfBytes(logits, dtype)
    with open(os.path.join(goldenDir, fileName), "wb") as f:
        f.write(data)
    hfDiff = float(np.abs(values - reference).max())
    case = {}
    if withKilnRounding:
        rounding = KilnRounding(loadModel(modelDir, torch.float32), dtype)
        with rounding:
            kilnRef = forward(rounding.model, promptIds + ids).float().numpy()
        refFile = f"{name}.{dtypeName}.case{index}.kiln_rounding.f32"
        refData = kilnRef.astype("<f4").tobytes()
        with open(os.path.join(goldenDir, refFile), "wb") as f:
            f.write(refData)
        rowGap = np.abs(kilnRef - reference).max(axis=1)
        print(f"    kiln-rounding reference: every row {rowGap.min():.4f}..{rowGap.max():.4f} "
              f"from fp32")
        case = {"kiln_rounding_file": refFile,
                "kiln_rounding_sha256": hashlib.sha256(refData).hexdigest()}
    print(f"  {dtypeName} case{index}: P={p} greedy={ids} |half - fp32| max {hfDiff:.4f}; "
          f"forward argmax == generate id at {forwardAgrees}/{kNewTokens} steps; "
          f"min top-2 gap {min(margins):.4f}")
    return {"prompt_ids": promptIds, "greedy_ids": ids, "logits_file": fileName,
            "logits_rows": int(values.shape[0]),
            "logits_sha256": hashlib.sha256(data).hexdigest(),
            "greedy_margins": [round(m, 6) for m in margins],
            "forward_argmax_matches_greedy": forwardAgrees,
            "hf_half_vs_fp32_max_abs": round(hfDiff, 6), **case}


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def writeJson(path: str, golden: dict) -> None:
    text = json.dumps(golden, indent=2)
    # Keep number lists on one line: readable diffs without one number per line.
    text = re.sub(r"\[\s+([-\d.,\se]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def goldensForModel(name, modelDir, modelDirField, goldenDir, withKilnRounding, dtypeNames,
                    attn):
    with open(os.path.join(goldenDir, f"{name}.json")) as f:
        fp32Golden = json.load(f)
    prompts = [c["prompt_ids"] for c in fp32Golden["cases"]]
    fp32Model = loadModel(modelDir, torch.float32, attn)
    if withKilnRounding:
        assert isinstance(fp32Model, LlamaForCausalLM), "KilnRounding is Llama-specific"
    print(f"{name}: {type(fp32Model).__name__}, vocab {fp32Model.config.vocab_size}, "
          f"{len(prompts)} prompts")
    for dtypeName in dtypeNames:
        dtype = kDtypes[dtypeName]
        model = loadModel(modelDir, dtype, attn)
        rounding = withKilnRounding and dtypeName == "bf16"
        cases = [makeCase(name, dtypeName, i, ids, model, fp32Model, modelDir, goldenDir, rounding)
                 for i, ids in enumerate(prompts)]
        golden = {
            "model": name, "model_dir": modelDirField, "dtype": dtypeName,
            "vocab_size": fp32Model.config.vocab_size,
            "how": f"transformers {type(model).__name__}.from_pretrained("
                   f"dtype=torch.{str(dtype)[6:]}), "
                   f"attn_implementation {model.config._attn_implementation}, CPU, 1 thread; "
                   "greedy ids from generate() (eos disabled), logits from one forward pass "
                   "without KV cache over prompt + greedy ids",
            "format": f"logits_file: raw little-endian {dtypeName}, logits_rows x vocab_size; "
                      "row r = logits after token r of prompt_ids + greedy_ids. greedy_margins[k]: "
                      "top-1 minus top-2 logit of row len(prompt_ids)-1+k. "
                      "forward_argmax_matches_greedy: steps whose row argmax is the generate() id. "
                      "hf_half_vs_fp32_max_abs: max |these logits - the fp32 model's| over all "
                      "rows. kiln_rounding_file (bf16 Llama fixtures only): raw little-endian f32 logits "
                      "of the same ids from the fp32 model rounding where plan.fbs says kiln does "
                      "(make_half_goldens.py KilnRounding)",
            "versions": versions(), "cases": cases}
        writeJson(os.path.join(goldenDir, f"{name}.{dtypeName}.json"), golden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.getcwd(), help="kiln repo root (default: cwd)")
    parser.add_argument("--assets", default=os.environ.get("KILN_ASSETS_DIR",
                                                           "/work/shared/assets"))
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(kModels),
                        help="write only these models' goldens (default: all of "
                             + ", ".join(kModels) + ")")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order: same bytes on every rerun
    goldenDir = os.path.join(args.repo, "tests/data/golden")
    for name, (where, dtypeNames, withKilnRounding, attn) in kModels.items():
        if args.only and name not in args.only:
            continue
        if where == "fixture":
            modelDir = os.path.join(args.repo, "tests/data/models", name)
            modelDirField = f"tests/data/models/{name}"
        else:
            modelDir = os.path.join(args.assets, where)
            modelDirField = f"shared:{where}"
            if not os.path.exists(os.path.join(modelDir, "config.json")):
                print(f"{name}: {modelDir} is absent; skipped", file=sys.stderr)
                continue
        goldensForModel(name, modelDir, modelDirField, goldenDir, withKilnRounding, dtypeNames,
                        attn)


if __name__ == "__main__":
    main()
