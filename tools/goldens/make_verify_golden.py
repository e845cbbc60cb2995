#!/usr/bin/env python3
"""Writes a `kiln verify --golden` golden for your own Hugging Face model, computed by transformers.

  make_verify_golden.py MODEL_DIR (--prompt-ids "1 2 3; 1 5" | --prompts-file FILE | --prompt TEXT)
                        --out GOLDEN.json [--dtype fp32|bf16|fp16] [--new-tokens 16]
                        [--tolerance T] [--threads N]

Then `kiln compile MODEL_DIR -o model.kiln [--dtype D]` and
`kiln verify model.kiln --golden GOLDEN.json` (exit 0 pass, 1 regression, 2 error; docs/verify.md).

For each prompt, on CPU, transformers (AutoModelForCausalLM, the checkpoint loaded in --dtype):
  - one forward pass over the whole prompt with the KV cache on (every row of logits), then one
    forward per new token, alone, against that cache: the same sequence of steps `kiln verify`
    runs (a prefill, then teacher-forced decode steps), so models whose rope depends on the
    sequence length (dynamic NTK, longrope) give the rows kiln must reproduce;
  - the new token of each step is the argmax of the previous row (greedy, no eos: always exactly
    --new-tokens ids).
Written beside GOLDEN.json: <stem>.case<i>.logits.<f32|bf16|fp16>, raw little-endian, one row of
vocab_size logits per token of prompt + greedy ids (the format of tests/data/golden, described in
tests/data/README.md). A half model's logits are stored in its dtype when they are exactly half
values (transformers' half lm_head returns half logits), else as f32 ("logits_dtype").

The golden's tolerance (max |kiln - transformers| over every logit) defaults by dtype: fp32 1e-4
(what the repository's fp32 goldens use; a large model may need more, measure it), bf16 0.35 and
fp16 0.04 (the bounds tests/e2e/half_dtype_golden_test.cc measured between kiln and transformers
in those dtypes on the tiny fixtures). A greedy step whose top-1/top-2 margin is at most twice
the tolerance is a near tie: kiln verify does not compare that id (its logits are still checked);
the script says how many there are.

--prompts-file: one JSON object per line, {"prompt_ids": [...]} or {"prompt": "text"}.
Cases come in this order: --prompt-ids, then --prompts-file, then each --prompt.
--prompt TEXT (repeatable) is tokenized with the model's own tokenizer (AutoTokenizer, special
tokens added as its tokenizer_config.json says, so BOS is included where the model uses one).
"""

import argparse
import hashlib
import inspect
import json
import os
import platform
import re
import sys

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:
    print(f"make_verify_golden: error: {e.name} is not installed: run this script with a Python "
          "that has torch and transformers (e.g. /opt/kiln-venv/bin/python)", file=sys.stderr)
    sys.exit(2)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

kDtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
kFileSuffix = {"fp32": "f32", "bf16": "bf16", "fp16": "fp16"}
kDefaultTolerance = {"fp32": 1e-4, "bf16": 0.35, "fp16": 0.04}


def fail(message: str) -> None:
    print(f"make_verify_golden: error: {message}", file=sys.stderr)
    sys.exit(2)


def parseIds(text: str, where: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        fail(f"{where}: '{text.strip()}' is not a list of token ids")
    if not ids:
        fail(f"{where}: a prompt is empty")
    return ids


def readPromptsFile(path: str) -> list[dict]:
    prompts = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"--prompts-file: cannot read '{path}': {e.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        where = f"--prompts-file {path} line {number}"
        if isinstance(entry, dict) and isinstance(entry.get("prompt_ids"), list):
            if not entry["prompt_ids"] or not all(isinstance(v, int) for v in entry["prompt_ids"]):
                fail(f"{where}: 'prompt_ids' must be a non-empty list of integers")
            prompts.append({"ids": entry["prompt_ids"], "text": None})
        elif isinstance(entry, dict) and isinstance(entry.get("prompt"), str):
            prompts.append({"ids": None, "text": entry["prompt"]})
        else:
            fail(f"{where}: expected {{\"prompt_ids\": [...]}} or {{\"prompt\": \"text\"}}")
    return prompts


def gatherPrompts(args) -> list[dict]:
    prompts = []
    if args.prompt_ids is not None:
        prompts += [{"ids": parseIds(p, "--prompt-ids"), "text": None}
                    for p in args.prompt_ids.split(";")]
    if args.prompts_file:
        prompts += readPromptsFile(args.prompts_file)
    prompts += [{"ids": None, "text": t} for t in args.prompt]
    if not prompts:
        fail("give prompts: --prompt-ids \"1 2 3; 1 5\", --prompts-file FILE or --prompt TEXT")
    if any(p["ids"] is None for p in prompts):
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
        for p in prompts:
            if p["ids"] is None:
                p["ids"] = list(tokenizer(p["text"])["input_ids"])
                if not p["ids"]:
                    fail(f"--prompt '{p['text']}' gives no tokens")
    return prompts


def loadModel(modelDir: str, dtypeName: str):
    # fp32 with eager attention as tools/goldens/make_llama_goldens.py; half with the default
    # (sdpa) as make_half_goldens.py, whose goldens the half tolerances were measured on.
    kwargs = {} if dtypeName != "fp32" else {"attn_implementation": "eager"}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            modelDir, dtype=kDtypes[dtypeName], **kwargs)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(
            modelDir, torch_dtype=kDtypes[dtypeName], **kwargs)
    return model.eval()


def incremental(model, promptIds: list[int], newTokens: int):
    """Prefill + one cached step per new token; returns (greedy ids, logits rows [P + N, vocab])."""
    # transformers 5.24 renamed the KV cache argument and output field past_key_values -> cache.
    cacheName = ("cache" if "cache" in inspect.signature(model.forward).parameters
                 else "past_key_values")
    rows, ids = [], []
    with torch.no_grad():
        out = model(torch.tensor([promptIds], dtype=torch.long), use_cache=True)
        rows.append(out.logits[0])
        for step in range(newTokens):
            nextId = int(torch.argmax(rows[-1][-1].float()))
            ids.append(nextId)
            out = model(torch.tensor([[nextId]], dtype=torch.long),
                        **{cacheName: getattr(out, cacheName)}, use_cache=True)
            rows.append(out.logits[0])
    return ids, torch.cat(rows, dim=0)


def storedDtype(allLogits: list, dtypeName: str) -> str:
    """The model's half dtype when every logit is one (transformers' half lm_head returns half
    logits), else fp32: the stored rows are then exactly what transformers returned."""
    if dtypeName == "fp32":
        return "fp32"
    half = kDtypes[dtypeName]
    exact = all(torch.equal(l.to(half).float(), l.float()) for l in allLogits)
    return dtypeName if exact else "fp32"


def logitsBytes(logits: torch.Tensor, stored: str) -> bytes:
    if stored == "fp32":
        return logits.float().numpy().astype("<f4").tobytes()
    return logits.to(kDtypes[stored]).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def versions() -> dict:
    out = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import tokenizers
        out["tokenizers"] = tokenizers.__version__
    except ImportError:
        pass
    out.update({"numpy": np.__version__, "python": platform.python_version()})
    return out


def writeJson(path: str, golden: dict) -> None:
    text = json.dumps(golden, indent=2)
    # Number lists on one line, as the repository's goldens.
    text = re.sub(r"\[\s+([-\d.,\se]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def runCase(model, index, prompt, args, vocab):
    for id_ in prompt["ids"]:
        if not 0 <= id_ < vocab:
            fail(f"prompt {index}: token id {id_} is outside the vocabulary [0, {vocab})")
    return incremental(model, prompt["ids"], args.new_tokens)


def writeCase(index, prompt, ids, logits, stored, outDir, stem, tolerance):
    data = logitsBytes(logits, stored)
    fileName = f"{stem}.case{index}.logits.{kFileSuffix[stored]}"
    with open(os.path.join(outDir, fileName), "wb") as f:
        f.write(data)
    values = logits.float().numpy()
    p = len(prompt["ids"])
    margins = []
    for k in range(len(ids)):
        top2 = np.sort(values[p - 1 + k])[-2:]
        margins.append(float(top2[1] - top2[0]))
    nearTies = sum(m <= 2 * tolerance for m in margins)
    print(f"case{index}: {p} prompt ids, greedy {ids}, min top-2 margin {min(margins):.6g}"
          + (f", {nearTies} near-tie steps (margin <= 2 x tolerance: kiln verify does not "
             f"compare those ids)" if nearTies else ""))
    return {"prompt_text": prompt["text"], "prompt_ids": prompt["ids"], "greedy_ids": ids,
            "logits_file": fileName, "logits_rows": int(values.shape[0]),
            "logits_sha256": hashlib.sha256(data).hexdigest(),
            "greedy_margins": [round(m, 6) for m in margins],
            "min_greedy_margin": round(min(margins), 6)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Writes a kiln verify golden for a Hugging Face model, with transformers on CPU.",
        epilog="See docs/verify.md.")
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="Hugging Face model directory")
    parser.add_argument("--prompt-ids", help="prompts as ids, ';' between prompts (\"1 5 9; 1 7\")")
    parser.add_argument("--prompts-file", metavar="FILE",
                        help="JSON lines: {\"prompt_ids\": [...]} or {\"prompt\": \"text\"}")
    parser.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                        help="a prompt as text, tokenized by the model's tokenizer (repeatable)")
    parser.add_argument("--out", required=True, metavar="GOLDEN.json", help="the golden to write")
    parser.add_argument("--dtype", choices=list(kDtypes), default="fp32",
                        help="dtype transformers runs the model in; compile with the same "
                             "(default fp32)")
    parser.add_argument("--new-tokens", type=int, default=16, help="greedy ids per prompt (16)")
    parser.add_argument("--tolerance", type=float,
                        help="max |logit difference| kiln verify allows (default by dtype: "
                             "fp32 1e-4, bf16 0.35, fp16 0.04)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (default: torch's choice; 1 reproduces bytes)")
    args = parser.parse_args()
    if args.new_tokens < 1:
        fail("--new-tokens must be at least 1")
    tolerance = kDefaultTolerance[args.dtype] if args.tolerance is None else args.tolerance
    if not tolerance >= 0:
        fail("--tolerance must be a non-negative number")
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        fail(f"'{args.model_dir}' has no config.json: give a Hugging Face model directory")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    prompts = gatherPrompts(args)
    model = loadModel(args.model_dir, args.dtype)
    outPath = os.path.abspath(args.out)
    outDir = os.path.dirname(outPath)
    os.makedirs(outDir, exist_ok=True)
    stem = os.path.basename(outPath)
    stem = stem[:-5] if stem.endswith(".json") else stem
    vocab = int(model.get_output_embeddings().weight.shape[0])
    results = [runCase(model, i, prompt, args, vocab) for i, prompt in enumerate(prompts)]
    logitsDtype = storedDtype([logits for _, logits in results], args.dtype)
    cases = [writeCase(i, prompt, ids, logits, logitsDtype, outDir, stem, tolerance)
             for i, (prompt, (ids, logits)) in enumerate(zip(prompts, results))]
    name = os.path.basename(os.path.normpath(args.model_dir))
    golden = {
        "model": name, "model_dir": os.path.abspath(args.model_dir), "dtype": args.dtype,
        "logits_dtype": logitsDtype, "vocab_size": vocab,
        "how": f"tools/goldens/make_verify_golden.py: transformers "
               f"{type(model).__name__}.from_pretrained(dtype={args.dtype}), attention "
               f"{model.config._attn_implementation}, CPU; per case one prefill of the prompt "
               f"with the KV cache, then one cached step per greedy id (argmax of the previous "
               f"row, no eos)",
        "format": f"logits_file: raw little-endian {logitsDtype}, logits_rows x vocab_size; row r "
                  "= logits after token r of prompt_ids + greedy_ids. greedy_margins[k]: top-1 "
                  "minus top-2 logit of row len(prompt_ids)-1+k",
        "versions": versions(),
        "tolerance": {"logits_max_abs": tolerance},
        "cases": cases}
    writeJson(outPath, golden)
    print(f"wrote {args.out} ({len(cases)} cases, {args.new_tokens} ids each, {args.dtype}, "
          f"tolerance {tolerance:g})")


if __name__ == "__main__":
    main()
