#!/usr/bin/env python3
"""Writes kiln's tiny Llama fixtures and the Hugging Face golden logits kiln is tested against.

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_llama_goldens.py

Outputs (see tests/data/README.md for the formats):
  tests/data/models/{tiny-llama,tiny-llama-tied,tiny-llama3}/      HF model dirs (random weights)
  tests/data/golden/<model>.json + <model>.case<i>.logits.f32      transformers outputs
Real models are read from $KILN_ASSETS_DIR (default /work/shared/assets), never copied.
Cross-checks against the independent references in assets/expected/ are printed, not stored.
CPU only, one thread, fixed seeds: a rerun reproduces the same bytes with the same library versions.
"""

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import sys

import numpy as np
import torch
import transformers
import tokenizers
from transformers import AutoTokenizer, GenerationConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_fixtures as fx  # noqa: E402

transformers.logging.set_verbosity_error()  # progress bars and max_length notices drown the report

kNewTokens = 16
kTolerance = 1e-4
# A greedy step whose top-2 gap is below this is a near-tie: an fp32 engine that is correct to
# kTolerance could legitimately pick the other token, so such a prompt is rejected.
kMinMargin = 1e-3

# Fixture prompts are plain ids (random weights: text means nothing). They avoid the eos ids 2 and
# 7 and include the last id 511 so out-of-range embedding reads would show.
kFixturePrompts = [
    [1],
    [1, 17, 300, 42, 511, 256, 99],
    [1, 5, 480, 77, 123, 310, 64, 256, 400, 9, 150, 333, 290, 45, 501, 88, 12, 260, 3, 444],
]

kRealModels = {
    "stories260K": {
        "dir": "models/stories260K-hf",
        "prompts": [None, "Lily and Tom were playing",
                    "One day, a little girl named Lily went to the park with her mom."],
        "dtype_note": "weights stored F32 (tied); golden computed in fp32, eager attention, CPU",
    },
    "tinystories-656K": {
        "dir": "models/tinystories-656K-hf",
        "prompts": [None, "Lily and Tom were playing",
                    "One day, Lily went to the park with her mom. She wanted to play on the "
                    "swings, but the swings were wet from the rain. Her mom said"],
        "dtype_note": "weights stored F32 (tied, only lm_head.weight stored); golden computed in "
                      "fp32, eager attention, CPU",
    },
}


def loadModel(modelDir: str) -> LlamaForCausalLM:
    model = LlamaForCausalLM.from_pretrained(modelDir, dtype=torch.float32,
                                             attn_implementation="eager")
    return model.eval()


def greedy(model: LlamaForCausalLM, promptIds: list[int], newTokens: int) -> list[int]:
    # No eos at all: the goldens must hold exactly newTokens ids even if eos is the argmax, and
    # suppressing eos (min_new_tokens with an eos set) would make greedy != argmax of the logits.
    # transformers 5 fills an eos_token_id=None in the passed config from the model's own
    # generation config, so the in-memory model's eos is cleared too (files are not touched).
    model.generation_config.eos_token_id = None
    cfg = GenerationConfig(do_sample=False, max_new_tokens=newTokens, min_new_tokens=newTokens,
                           eos_token_id=None, pad_token_id=0, bos_token_id=1, num_beams=1,
                           temperature=None, top_p=None, top_k=None, repetition_penalty=None)
    inputs = torch.tensor([promptIds], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=cfg)
    ids = out[0, len(promptIds):].tolist()
    if len(ids) != newTokens:
        raise SystemExit(f"generate returned {len(ids)} new tokens, expected {newTokens}")
    return ids


def forwardLogits(model: LlamaForCausalLM, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        logits = model(torch.tensor([ids], dtype=torch.long), use_cache=False).logits
    return logits[0].to(torch.float32).numpy()


def makeCase(model, name: str, index: int, promptIds: list[int], promptText, eosIds,
             goldenDir: str):
    greedyIds = greedy(model, promptIds, kNewTokens)
    logits = forwardLogits(model, promptIds + greedyIds)
    p = len(promptIds)
    margins = []
    for k, tok in enumerate(greedyIds):
        row = logits[p - 1 + k]
        if int(np.argmax(row)) != tok:
            raise SystemExit(f"{name} case{index}: argmax of row {p - 1 + k} is "
                             f"{int(np.argmax(row))} but greedy id {k} is {tok}; change the prompt")
        top2 = np.sort(row)[-2:]
        margins.append(float(top2[1] - top2[0]))
    if set(greedyIds) & set(eosIds):
        raise SystemExit(f"{name} case{index}: greedy ids {greedyIds} contain an eos id {eosIds}; "
                         "change the prompt (goldens must also hold for eos-stopping generation)")
    if min(margins) < kMinMargin:
        raise SystemExit(f"{name} case{index}: near-tie (top-2 gap {min(margins):.2e} < "
                         f"{kMinMargin}); change the prompt")
    fileName = f"{name}.case{index}.logits.f32"
    data = logits.astype("<f4").tobytes()
    with open(os.path.join(goldenDir, fileName), "wb") as f:
        f.write(data)
    print(f"  case{index}: P={p} rows={logits.shape[0]} prompt={promptIds} greedy={greedyIds} "
          f"logit std={logits.std():.3f} min top-2 gap={min(margins):.4f}")
    return {"prompt_text": promptText, "prompt_ids": promptIds, "greedy_ids": greedyIds,
            "logits_file": fileName, "logits_rows": int(logits.shape[0]),
            "logits_sha256": hashlib.sha256(data).hexdigest(),
            "min_greedy_margin": round(min(margins), 6)}, logits


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def writeGoldenJson(path: str, golden: dict) -> None:
    text = json.dumps(golden, indent=2)
    # Keep id lists on one line: readable diffs without one id per line.
    text = re.sub(r"\[\s+([-\d,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def eosIdsOf(modelDir: str) -> list[int]:
    ids = []
    for fileName in ("config.json", "generation_config.json"):
        path = os.path.join(modelDir, fileName)
        if os.path.exists(path):
            with open(path) as f:
                eos = json.load(f).get("eos_token_id")
            ids += eos if isinstance(eos, list) else ([] if eos is None else [eos])
    return sorted(set(ids))


# tiny-llama's linears as the weight-only quantizers (GPTQ, AWQ, fp8) quantize them; the
# embedding, norms and lm_head stay as they are.
QUANTIZED_LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def writeQuantizedFixture(name, source, repo, quantizationConfig, quantizeLinear, toStored,
                          saveFile):
    """tests/data/models/<name>: the model at `source` with its QUANTIZED_LINEARS quantized: its
    tokenizer and generation files, config.json with `quantizationConfig`, model.safetensors
    written by saveFile(tensors, path). quantizeLinear(prefix, fp32 weight tensor) gives the
    stored tensors by name and the fp32 weights they stand for; toStored(tensor) the form every
    other tensor is stored in. Returns the model holding the weights the layout stands for (to
    compute the golden with) and how many linears were quantized."""
    fixtureDir = os.path.join(repo, "tests/data/models", name)
    if os.path.isdir(fixtureDir):
        shutil.rmtree(fixtureDir)
    os.makedirs(fixtureDir)
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(source, f), fixtureDir)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = quantizationConfig
    with open(os.path.join(fixtureDir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    model = loadModel(source)
    tensors, dequantized = {}, {}
    for tensorName, param in model.state_dict().items():
        prefix = tensorName[:-len(".weight")] if tensorName.endswith(".weight") else None
        if prefix and any(prefix.endswith(l) for l in QUANTIZED_LINEARS):
            stored, values = quantizeLinear(prefix, param.detach().to(torch.float32))
            tensors.update(stored)
            dequantized[tensorName] = values
        else:
            tensors[tensorName] = toStored(param.detach())
    saveFile(tensors, os.path.join(fixtureDir, "model.safetensors"), metadata={"format": "pt"})
    with torch.no_grad():
        state = model.state_dict()
        for tensorName, w in dequantized.items():
            state[tensorName].copy_(torch.as_tensor(w))
    return model, len(dequantized)


def tinyLlamaPrompts(goldenDir: str) -> list:
    """The fp32 tiny-llama golden's prompts (ids, text), which the goldens of its quantized
    fixtures reuse."""
    with open(os.path.join(goldenDir, "tiny-llama.json")) as f:
        fp32 = json.load(f)
    return [(c["prompt_ids"], c.get("prompt_text")) for c in fp32["cases"]]


def goldenForModel(name, model, modelDir, modelDirField, dtypeNote, prompts, goldenDir):
    vocab = model.config.vocab_size
    eosIds = eosIdsOf(modelDir)
    print(f"{name}: vocab {vocab}, eos ids {eosIds}")
    cases, allLogits = [], []
    for i, (ids, text) in enumerate(prompts):
        case, logits = makeCase(model, name, i, ids, text, eosIds, goldenDir)
        cases.append(case)
        allLogits.append(logits)
    golden = {"model": name, "model_dir": modelDirField, "vocab_size": vocab,
              "dtype_note": dtypeNote, "versions": versions(),
              "tolerance": {"logits_max_abs": kTolerance}, "cases": cases}
    writeGoldenJson(os.path.join(goldenDir, f"{name}.json"), golden)
    return cases, allLogits


def checkLlama3Rope(spec, model) -> None:
    classes = fx.describeLlama3Frequencies(spec)
    dim = spec.head_dim
    base = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    ratio = (model.model.rotary_emb.inv_freq.float() / base).tolist()
    print(f"  llama3 rope: unscaled {classes['unscaled']}, smoothed {classes['smoothed']}, "
          f"scaled {classes['scaled']}")
    print("  inv_freq / unscaled inv_freq per index: " + " ".join(f"{r:.4f}" for r in ratio))
    factor = spec.rope_scaling["factor"]
    for i in classes["unscaled"]:
        assert abs(ratio[i] - 1.0) < 1e-6, (i, ratio[i])
    for i in classes["scaled"]:
        assert abs(ratio[i] - 1.0 / factor) < 1e-6, (i, ratio[i])
    for i in classes["smoothed"]:
        assert 1.0 / factor + 1e-3 < ratio[i] < 1.0 - 1e-3, (i, ratio[i])
    assert all(classes[c] for c in classes), "llama3 fixture must hit all three branches"


def makeFixturesAndGoldens(repo: str, goldenDir: str) -> None:
    tok = fx.trainTokenizer()
    for spec in fx.kFixtures:
        modelDir = os.path.join(repo, "tests/data/models", spec.name)
        fx.writeFixture(spec, modelDir, tok, transformers.__version__)
        # Goldens come from the saved files (upcast to fp32), so they also validate the fixture.
        model = loadModel(modelDir)
        assert model.config.vocab_size == fx.kVocab
        hfTok = AutoTokenizer.from_pretrained(modelDir)
        sample = hfTok("Mira rang the bell.")["input_ids"]
        assert sample[0] == fx.kBos and len(hfTok) == fx.kVocab, (sample, len(hfTok))
        sizes = {f: os.path.getsize(os.path.join(modelDir, f))
                 for f in sorted(os.listdir(modelDir))}
        print(f"{spec.name}: {spec.notes}; files {sizes}; "
              f"total {sum(sizes.values())} bytes; tokenizer sample {sample}")
        if spec.rope_scaling:
            checkLlama3Rope(spec, model)
        note = (f"weights stored {fx.kDtypeNames[spec.storage_dtype]}; golden computed in fp32 "
                "from those stored weights upcast exactly to fp32, eager attention, CPU")
        goldenForModel(spec.name, model, modelDir, f"tests/data/models/{spec.name}", note,
                       [(p, None) for p in kFixturePrompts], goldenDir)


def realGoldens(assets: str, goldenDir: str) -> dict:
    out = {}
    for name, info in kRealModels.items():
        modelDir = os.path.join(assets, info["dir"])
        model = loadModel(modelDir)
        hfTok = AutoTokenizer.from_pretrained(modelDir)
        prompts = []
        for text in info["prompts"]:
            ids = [1] if text is None else hfTok(text)["input_ids"]
            assert ids[0] == 1, (name, text, ids)
            prompts.append((ids, text))
        cases, logits = goldenForModel(name, model, modelDir, f"shared:{info['dir']}",
                                       info["dtype_note"], prompts, goldenDir)
        out[name] = (model, cases, logits)
    return out


def crossCheckStories260K(assets: str, model, cases, logits) -> None:
    with open(os.path.join(assets, "expected/stories260K_hf_reference_logits.json")) as f:
        ref = json.load(f)
    inputs = cases[0]["prompt_ids"] + cases[0]["greedy_ids"]
    worst = 0.0
    for step in ref["steps"]:
        assert inputs[step["pos"]] == step["input_token"], step["pos"]
        diff = np.abs(logits[0][step["pos"]] - np.array(step["logits"], dtype=np.float64)).max()
        worst = max(worst, float(diff))
    print(f"CROSS-CHECK stories260K logits vs expected/stories260K_hf_reference_logits.json "
          f"({len(ref['steps'])} positions x 512): max abs diff {worst:.3e}")

    with open(os.path.join(assets, "expected/stories260K_llama2c_reference.md")) as f:
        md = f.read()
    runs = re.findall(r"ARGS: (.*)\nPROMPT_TOKEN_IDS[^:]*: ([\d ]+)\nNEXT_TOKEN_IDS.*?\): ([\d ]+)",
                      md)
    if len(runs) < 5:
        raise SystemExit(f"found {len(runs)} runs in stories260K_llama2c_reference.md, expected 6")
    for args, promptStr, nextStr in runs:
        if "-t 0.0" not in args:
            continue  # the top-p run uses llama2.c's RNG; nothing to compare greedily
        prompt = [int(x) for x in promptStr.split()]
        expected = [int(x) for x in nextStr.split()][len(prompt) - 1:]
        got = greedy(model, prompt, len(expected))
        same = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(expected))
        print(f"CROSS-CHECK stories260K greedy vs llama2.c [{args}]: {same}/{len(expected)} ids "
              f"match" + ("" if same == len(expected) else f" (first mismatch at {same})"))


def crossCheckTinyStories656K(assets: str, model, cases) -> None:
    with open(os.path.join(assets, "expected/tinystories656K_hf_reference_greedy.json")) as f:
        ref = json.load(f)
    for refCase in ref["cases"]:
        expected = refCase["greedy_new_ids"]
        got = greedy(model, refCase["input_ids"], len(expected))
        same = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(expected))
        goldenHits = [c for c in cases if c["prompt_ids"] == refCase["input_ids"]]
        inGolden = ""
        if goldenHits:
            ok = goldenHits[0]["greedy_ids"] == expected[:kNewTokens]
            inGolden = f"; golden case greedy_ids {'match' if ok else 'DIFFER'}"
        print(f"CROSS-CHECK tinystories-656K greedy vs reference prompt {refCase['prompt']!r}: "
              f"{same}/{len(expected)} ids match{inGolden}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.getcwd(), help="kiln repo root (default: cwd)")
    parser.add_argument("--assets", default=os.environ.get("KILN_ASSETS_DIR",
                                                           "/work/shared/assets"))
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order: same bytes on every rerun
    goldenDir = os.path.join(args.repo, "tests/data/golden")
    os.makedirs(goldenDir, exist_ok=True)
    makeFixturesAndGoldens(args.repo, goldenDir)
    real = realGoldens(args.assets, goldenDir)
    crossCheckStories260K(args.assets, *real["stories260K"])
    crossCheckTinyStories656K(args.assets, real["tinystories-656K"][0], real["tinystories-656K"][1])


if __name__ == "__main__":
    main()
