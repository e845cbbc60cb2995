#!/usr/bin/env python3
"""Writes kiln's tiny Mistral / Qwen2 / Qwen3 / Phi-3 / Gemma 2 / Gemma 3 / Mixtral / Qwen3-MoE /
Qwen2-MoE fixtures and their HF golden logits.

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_family_goldens.py
(`--only NAME ...` writes only those fixtures and goldens; the others are left untouched.)

Outputs (formats in tests/data/README.md; the same as make_llama_goldens.py's):
  tests/data/models/<fixture>/                                     HF model dirs (random weights)
  tests/data/golden/<fixture>.json + <fixture>.case<i>.logits.f32  transformers outputs
Fixtures are listed in family_fixtures.py. Goldens are one fp32 eager forward over prompt + 16
greedy ids, except for fixtures whose rope depends on the sequence length at run time (dynamic
NTK, longrope): their rows come from a prefill forward plus one cached forward per greedy token,
as generate computes them, and their JSON says "incremental": true.
Gemma 2 fixtures also get checks that their soft-capping, (1 + weight) norms, embedding scale and
query_pre_attn_scalar each change the golden (reportGemma2), summarised in the JSON's family_note;
Gemma 3 fixtures (tiny-gemma3, and tiny-gemma3-mm: the text-only logits of
Gemma3ForConditionalGeneration) get the same for their per-layer-type ropes, linear scaling, q/k
norms, (1 + weight) norms, embedding scale, query_pre_attn_scalar and window (reportGemma3).
Mixture-of-experts fixtures (tiny-mixtral, tiny-qwen3-moe, tiny-qwen2-moe) run their experts with
transformers' "eager" experts implementation (a loop over experts; the default "grouped_mm" is
checked to agree) and get routing checks: transformers' router decisions equal an independent
float64 rendering of the family's rule, every expert is chosen on the golden sequences, the k-th /
(k+1)-th router logit gap stays above kMinRouterGap everywhere, and renormalisation (present or
absent), top-k, the dense layers (Qwen3-MoE, Qwen2-MoE), the shared expert and its sigmoid gate
and the q/k/v biases (Qwen2-MoE) each change the golden (reportMoe).
CPU only, one thread, fixed seeds: a rerun reproduces the same bytes with the same library versions.
"""

import argparse
import copy
import hashlib
import inspect
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
import transformers.models.gemma2.modeling_gemma2 as gemma2_modeling
from safetensors import safe_open
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig,
                          PreTrainedTokenizerFast)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_fixtures as ff  # noqa: E402
import llama_fixtures as fx  # noqa: E402
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

# An fp32 forward over the whole sequence and prefill + cached decode steps are the same
# computation in a different order; more than this apart means the cache path is not equivalent.
kSameComputation = 1e-5
# Gemma 2 fixtures: their pre-cap logits reach ~13 (several x the final cap) and four layers of
# post-norms scale sublayer outputs, so the fp32 rounding of a different reduction order alone
# reaches ~2e-5 (with every op in float64 -- RMSNorm and softmax included, which transformers
# runs in fp32 -- the two paths agree to the last bit of the fp32 output). Gemma 3 likewise (logits
# up to ~15, six layers): its fixtures' paths differ by up to 1.8e-5 in fp32 and by 2.8e-14 with
# every op in float64 (the fp32 casts of the two agree bit for bit).
kSameComputationByFamily = {"gemma2": 5e-5, "gemma3": 5e-5, "gemma3mm": 5e-5}
# For the incremental fixtures the whole-sequence forward must be visibly different, or the
# "incremental" marker would not matter.
kMustDiffer = 1e-3

kIncrementalNote = ("rows are NOT one forward over prompt + greedy ids: row r < P comes from one "
                    "prefill forward over the P prompt ids (use_cache=True); row P+k from one "
                    "forward of greedy id k alone at position P+k against that KV cache (keys "
                    "keep the rotation they were cached with). That is what transformers' generate "
                    "computes, except where generate_note says otherwise")


def modelTypeOf(modelDir: str) -> str:
    with open(os.path.join(modelDir, "config.json")) as f:
        return json.load(f)["model_type"]


def loadModel(modelDir: str, **overrides):
    # A fresh model for every computation: dynamic NTK keeps state (its grown inv_freq) between
    # calls, and a golden must not depend on what ran before it.
    if modelTypeOf(modelDir) in ff.kMoeFamilies:
        # transformers 5.24 defaults to "grouped_mm" (torch._grouped_mm); the goldens use the plain
        # per-expert loop (MixtralExperts.forward / Qwen3MoeExperts.forward as written)
        overrides.setdefault("experts_implementation", "eager")
    model = AutoModelForCausalLM.from_pretrained(modelDir, dtype=torch.float32,
                                                 attn_implementation="eager", **overrides)
    return model.eval()


def textModelOf(model):
    """The decoder stack: model.model, or Gemma3ForConditionalGeneration's model.language_model."""
    return getattr(model.model, "language_model", model.model)


def ropeState(model) -> tuple[np.ndarray, float]:
    rot = textModelOf(model).rotary_emb
    if not hasattr(rot, "inv_freq"):
        # Gemma 3: one rope per layer type (checked in checkGemma3Rope); record the global one
        return (rot.full_attention_inv_freq.detach().double().numpy().copy(),
                float(rot.full_attention_attention_scaling))
    return rot.inv_freq.detach().double().numpy().copy(), float(rot.attention_scaling)


def _cacheKwarg(model) -> str:
    # transformers 5.24 renamed forward's `past_key_values` to `cache` (the old name still works,
    # with a deprecation warning)
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def incrementalLogits(model, promptIds: list[int], greedyIds: list[int]):
    """Prefill over the prompt, then one cached forward per greedy id. Returns the rows (same
    layout as a whole-sequence forward) and the rope state (inv_freq, attention scaling) each row
    was computed with."""
    rows, ropes = [], []
    cacheArg = _cacheKwarg(model)
    with torch.no_grad():
        out = model(torch.tensor([promptIds], dtype=torch.long), use_cache=True)
        rows.append(out.logits[0].float().numpy())
        ropes += [ropeState(model)] * len(promptIds)
        cache = getattr(out, cacheArg)
        for k, tok in enumerate(greedyIds):
            pos = len(promptIds) + k
            out = model(torch.tensor([[tok]], dtype=torch.long), **{cacheArg: cache},
                        position_ids=torch.tensor([[pos]]), use_cache=True)
            rows.append(out.logits[0].float().numpy())
            ropes.append(ropeState(model))
            cache = getattr(out, cacheArg)
    return np.concatenate(rows, axis=0), ropes


def generateGreedy(model, promptIds: list[int]) -> tuple[list[int], np.ndarray]:
    """make_llama_goldens.greedy (eos disabled, exactly 16 ids), also returning the logits generate
    computed for each new id (rows P-1 .. P+14 of the golden)."""
    model.generation_config.eos_token_id = None
    cfg = GenerationConfig(do_sample=False, max_new_tokens=mlg.kNewTokens,
                           min_new_tokens=mlg.kNewTokens, eos_token_id=None, pad_token_id=0,
                           bos_token_id=1, num_beams=1, temperature=None, top_p=None, top_k=None,
                           repetition_penalty=None, output_logits=True,
                           return_dict_in_generate=True)
    inputs = torch.tensor([promptIds], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=cfg)
    ids = out.sequences[0, len(promptIds):].tolist()
    if len(ids) != mlg.kNewTokens:
        raise SystemExit(f"generate returned {len(ids)} new tokens, expected {mlg.kNewTokens}")
    return ids, torch.cat([l.float() for l in out.logits], dim=0).numpy()


def cachedGreedy(model, promptIds: list[int]) -> list[int]:
    """Greedy decoding by prefill + one-token cached forwards (the cache is never dropped)."""
    cacheArg = _cacheKwarg(model)
    ids = []
    with torch.no_grad():
        out = model(torch.tensor([promptIds], dtype=torch.long), use_cache=True)
        for k in range(mlg.kNewTokens):
            ids.append(int(torch.argmax(out.logits[0, -1])))
            if k + 1 == mlg.kNewTokens:
                break
            out = model(torch.tensor([[ids[-1]]], dtype=torch.long),
                        **{cacheArg: getattr(out, cacheArg)},
                        position_ids=torch.tensor([[len(promptIds) + k]]), use_cache=True)
    return ids


def margins(logits: np.ndarray, p: int, greedyIds: list[int], where: str) -> list[float]:
    out = []
    for k, tok in enumerate(greedyIds):
        row = logits[p - 1 + k]
        if int(np.argmax(row)) != tok:
            raise SystemExit(f"{where}: argmax of row {p - 1 + k} is {int(np.argmax(row))} but "
                             f"greedy id {k} is {tok}")
        top2 = np.sort(row)[-2:]
        out.append(float(top2[1] - top2[0]))
    return out


def generateRecomputes(spec) -> bool:
    """Phi3ForCausalLM.prepare_inputs_for_generation drops the KV cache the first time the sequence
    reaches original_max_position_embeddings + 1 tokens, so generate re-prefills everything with the
    long factors there. The golden rows keep the cache (prefill + one-token steps, no recompute):
    from that step on generate's logits differ from them (its greedy ids must still match)."""
    rs = ff.configDict(spec, "").get("rope_scaling") or {}
    return spec.family == "phi3" and rs.get("type", rs.get("rope_type")) == "longrope"


def makeCase(spec, modelDir: str, index: int, promptIds: list[int], eosIds, goldenDir: str):
    name = f"{spec.name} case{index}"
    sameTol = kSameComputationByFamily.get(spec.family, kSameComputation)
    genIds, genLogits = generateGreedy(loadModel(modelDir), promptIds)
    greedyIds = cachedGreedy(loadModel(modelDir), promptIds)
    if genIds != greedyIds and not generateRecomputes(spec):
        raise SystemExit(f"{name}: generate gives {genIds}, prefill + cached steps {greedyIds}")
    whole = mlg.forwardLogits(loadModel(modelDir), promptIds + greedyIds)
    inc, ropes = incrementalLogits(loadModel(modelDir), promptIds, greedyIds)
    diff = float(np.abs(whole - inc).max())
    p = len(promptIds)
    if spec.incremental:
        logits = inc
        how = f"incremental (whole-sequence forward differs by {diff:.3e})"
    else:
        logits = whole
        how = f"whole-sequence (incremental agrees to {diff:.1e})"
        if diff > sameTol:
            raise SystemExit(f"{name}: whole-sequence and incremental logits differ by {diff:.3e} "
                             f"> {sameTol}; the cache path is not equivalent")
    gaps = margins(logits, p, greedyIds, name)
    # generate's logits rows, compared while it was fed the same ids as the golden
    same = next((k for k, (a, b) in enumerate(zip(genIds, greedyIds)) if a != b), len(genIds))
    sameRows = min(same + 1, mlg.kNewTokens)
    genDiff = float(np.abs(genLogits[:sameRows] - logits[p - 1:p - 1 + sameRows]).max())
    if genDiff > sameTol and not generateRecomputes(spec):
        raise SystemExit(f"{name}: generate's logits differ from the golden rows by {genDiff:.3e}")
    how += f"; generate's own logits differ by {genDiff:.1e}"
    if genIds != greedyIds:
        how += f"; generate's ids differ from greedy id {same} on: {genIds}"
    if set(greedyIds) & set(eosIds):
        raise SystemExit(f"{name}: greedy ids {greedyIds} contain an eos id {eosIds}; change the "
                         "seed (goldens must also hold for eos-stopping generation)")
    if min(gaps) < mlg.kMinMargin:
        raise SystemExit(f"{name}: near-tie (top-2 gap {min(gaps):.2e} < {mlg.kMinMargin}); "
                         "change the seed")
    fileName = f"{spec.name}.case{index}.logits.f32"
    data = logits.astype("<f4").tobytes()
    with open(os.path.join(goldenDir, fileName), "wb") as f:
        f.write(data)
    print(f"  case{index}: P={p} rows={logits.shape[0]} greedy={greedyIds} logit "
          f"std={logits.std():.3f} min top-2 gap={min(gaps):.4f}; {how}")
    case = {"prompt_text": None, "prompt_ids": promptIds, "greedy_ids": greedyIds,
            "logits_file": fileName, "logits_rows": int(logits.shape[0]),
            "logits_sha256": hashlib.sha256(data).hexdigest(),
            "min_greedy_margin": round(min(gaps), 6)}
    if generateRecomputes(spec):
        case["hf_generate_greedy_ids"] = genIds
    return case, diff, ropes, genDiff


# ---- fixture-specific checks -------------------------------------------------------------------

def tensorNames(modelDir: str) -> list[str]:
    with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
        return sorted(f.keys())


def checkLayout(spec, modelDir: str, model) -> None:
    if spec.family in ff.kGemma3Families:
        checkGemma3Layout(spec, modelDir, model)
        return
    if spec.family in ff.kMoeFamilies:
        checkMoeLayout(spec, modelDir, model)
        return
    names = tensorNames(modelDir)
    with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(n).get_dtype() for n in names}
    want = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    assert dtypes == {want[spec.storage_dtype]}, dtypes
    assert ("lm_head.weight" in names) == (not spec.tied), (spec.name, "lm_head")
    layer0 = [n[len("model.layers.0."):] for n in names if n.startswith("model.layers.0.")]
    if spec.family == "gemma2":
        perLayer = sorted(f"{m}.weight" for m in (
            "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
            "post_feedforward_layernorm", "self_attn.q_proj", "self_attn.k_proj",
            "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
            "mlp.down_proj"))
        want = sorted(["model.embed_tokens.weight", "model.norm.weight"]
                      + [f"model.layers.{i}.{n}" for i in range(spec.num_layers) for n in perLayer])
        assert names == want, sorted(set(names) ^ set(want))
        cfg = model.config
        with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
            shapes = {n: tuple(f.get_slice(n).get_shape()) for n in names}
            norms = {n: f.get_tensor(n) for n in names if n.endswith("norm.weight")}
        hd, h = cfg.head_dim, cfg.hidden_size
        assert shapes["model.layers.0.self_attn.q_proj.weight"] == (cfg.num_attention_heads * hd, h)
        assert shapes["model.layers.0.self_attn.k_proj.weight"] == (cfg.num_key_value_heads * hd, h)
        assert shapes["model.layers.0.self_attn.o_proj.weight"] == (h, cfg.num_attention_heads * hd)
        # stored norm weights are the offset from 1 (Gemma's RMSNorm multiplies by 1 + weight)
        byKey = {}
        for n, w in norms.items():
            byKey.setdefault(ff.normKey(n), []).append(w)
            assert abs(float(w.mean()) - ff.normCenter(spec, n)) < 0.05, (n, float(w.mean()))
            assert 0.05 < float(w.std()) < 0.2, (n, float(w.std()))
        print("  stored norm weights (multiplier 1 + w): " + ", ".join(
            f"{k} mean {float(torch.cat(v).mean()):+.3f} std {float(torch.cat(v).std()):.3f}"
            for k, v in sorted(byKey.items())))
        print("  safetensors tensors (name shape):")
        for n in names:
            if not n.startswith("model.layers.") or n.startswith("model.layers.0."):
                print(f"    {n} {list(shapes[n])}")
        print(f"    ... and the same 11 for model.layers.1..{spec.num_layers - 1}")
    elif spec.family == "phi3":
        assert "self_attn.qkv_proj.weight" in layer0 and "mlp.gate_up_proj.weight" in layer0, \
            layer0
        assert not any(k in n for n in layer0 for k in ("q_proj", "gate_proj")), layer0
    else:
        assert "self_attn.q_proj.weight" in layer0, layer0
    biases = sorted(n for n in layer0 if n.endswith(".bias"))
    if spec.family == "qwen2":
        assert biases == ["self_attn.k_proj.bias", "self_attn.q_proj.bias",
                          "self_attn.v_proj.bias"], biases
    else:
        assert biases == [], biases
    if spec.family == "qwen3":
        qn = model.model.layers[0].self_attn.q_norm.weight.detach()
        assert "self_attn.q_norm.weight" in layer0 and "self_attn.k_norm.weight" in layer0
        assert qn.shape[0] == model.config.head_dim and float((qn - 1).abs().max()) > 0.05
    print(f"  tensors: {len(names)} ({', '.join(layer0)} per layer)")


def checkSlidingWindow(spec, modelDir: str, cfg: dict, model) -> None:
    if spec.family in ff.kGemma3Families:
        checkGemma3Window(spec, modelDir, model, mlg.kFixturePrompts[2] + [11] * 16)
        return
    if spec.family == "qwen2_moe":
        # Qwen1.5-MoE-A2.7B: sliding_window 32768 with use_sliding_window false; Qwen2MoeConfig
        # then sets sliding_window 0 and every layer type full_attention
        assert cfg["sliding_window"] == 32768 and cfg["use_sliding_window"] is False
        assert not model.config.sliding_window, model.config.sliding_window
        assert set(model.config.layer_types) == {"full_attention"}, model.config.layer_types
        assert all(getattr(layer.self_attn, "sliding_window", None) is None
                   for layer in model.model.layers)
        print(f"  sliding_window {cfg['sliding_window']} in config.json, use_sliding_window false: "
              f"transformers applies no window (sliding_window {model.config.sliding_window!r}, "
              f"layer_types all full_attention)")
        return
    if spec.family in ff.kMoeFamilies:
        # Mixtral-8x7B and Qwen3-30B-A3B: sliding_window null (Qwen3-MoE also use_sliding_window
        # false); every layer attends to the whole causal prefix
        assert cfg["sliding_window"] is None and model.config.sliding_window is None
        assert all(getattr(layer.self_attn, "sliding_window", None) is None
                   for layer in model.model.layers)
        print("  sliding_window null: no window on any layer")
        return
    window = model.config.sliding_window
    if spec.family in ("qwen2", "qwen3"):
        # Qwen's sliding_window only applies when use_sliding_window is true (never in published
        # Qwen2/2.5/3 checkpoints); transformers turns it off for every layer.
        assert window is None and set(model.config.layer_types) == {"full_attention"}, window
        print(f"  sliding_window {cfg.get('sliding_window')} in config.json, use_sliding_window "
              f"false: transformers applies no window (layer_types all full_attention)")
        return
    assert window == cfg["sliding_window"], (window, cfg["sliding_window"])
    ids = mlg.kFixturePrompts[2] + [11] * 16
    if spec.family == "gemma2":
        checkGemma2Window(spec, modelDir, cfg, model, ids)
        return
    windowed = mlg.forwardLogits(model, ids)
    full = mlg.forwardLogits(loadModel(modelDir, sliding_window=None), ids)
    diff = np.abs(windowed - full).max(axis=1)
    first = int(np.argmax(diff > 1e-6)) if (diff > 1e-6).any() else None
    where = f"from row {first} on (max {diff.max():.3f})" if first is not None else "nowhere"
    print(f"  sliding_window {window}: over 36 tokens the windowed forward differs from an "
          f"unwindowed one {where}; key j is visible to query i iff i - {window} < j <= i")
    if window < 36:
        # row `window` is the first query whose oldest key (0) falls out of the window
        assert first == window, (first, window)
    else:
        assert first is None


def firstDiffRow(a: np.ndarray, b: np.ndarray):
    diff = np.abs(a - b).max(axis=1)
    return (int(np.argmax(diff > 1e-6)) if (diff > 1e-6).any() else None), float(diff.max())


def checkGemma2Window(spec, modelDir: str, cfg: dict, model, ids: list[int]) -> None:
    """Gemma 2 alternates sliding (even layer index) and full (odd) attention. transformers 5 reads
    it from config.layer_types (written explicitly here; when absent, Gemma2Config fills in
    sliding for i % 2 == 0, which is what published Gemma 2 checkpoints, having no such key, get).
    The window applies on the sliding layers only."""
    window = cfg["sliding_window"]
    n = cfg["num_hidden_layers"]
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    assert cfg["layer_types"] == alternating, cfg["layer_types"]
    noKey = transformers.Gemma2Config(**{k: v for k, v in cfg.items() if k != "layer_types"})
    assert list(noKey.layer_types) == alternating, noKey.layer_types
    assert list(model.config.layer_types) == alternating, model.config.layer_types
    got = [layer.self_attn.sliding_window for layer in model.model.layers]
    assert got == [window if t == "sliding_attention" else None for t in alternating], got
    windowed = mlg.forwardLogits(model, ids)
    print(f"  layer_types {alternating} (also Gemma2Config's default without the key); "
          f"per-layer window {got}")
    full = mlg.forwardLogits(loadModel(modelDir, layer_types=["full_attention"] * n), ids)
    first, worst = firstDiffRow(windowed, full)
    print(f"  sliding_window {window}: over {len(ids)} tokens the forward differs from an "
          f"all-full-attention one from row {first} on (max {worst:.3f}); key j is visible to "
          f"query i iff i - {window} < j <= i on the sliding layers")
    assert first == window, (first, window)
    # every layer's kind matters: flipping any one layer changes the rows from `window` on
    for i in range(n):
        flipped = list(alternating)
        flipped[i] = "full_attention" if alternating[i] == "sliding_attention" else \
            "sliding_attention"
        other = mlg.forwardLogits(loadModel(modelDir, layer_types=flipped), ids)
        first, worst = firstDiffRow(windowed, other)
        print(f"    layer {i} made {flipped[i]}: differs from row {first} on (max {worst:.3f})")
        assert first == window, (i, first, window)


def yarnInvFreq(dim, base, factor, orig, betaFast=32.0, betaSlow=1.0) -> np.ndarray:
    def corr(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(math.floor(corr(betaFast)), 0), min(math.ceil(corr(betaSlow)), dim - 1)
    i = np.arange(dim // 2, dtype=np.float64)
    ramp = np.clip((i - low) / (high - low if high != low else 0.001), 0.0, 1.0)
    extrap = 1.0 / base ** (2 * i / dim)
    return extrap / factor * ramp + extrap * (1.0 - ramp)


def checkRope(spec, cfg: dict, model) -> None:
    if spec.family in ff.kGemma3Families:
        checkGemma3Rope(spec, cfg, model)
        return
    rs = cfg.get("rope_scaling")
    headDim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    dim = int(headDim * cfg.get("partial_rotary_factor", 1.0))
    base = cfg["rope_theta"]
    plain = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv, scaling = ropeState(model)
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    assert inv.shape == (dim // 2,), (inv.shape, dim)
    if kind == "yarn":
        want = yarnInvFreq(dim, base, rs["factor"], rs["original_max_position_embeddings"])
        wantScaling = 0.1 * math.log(rs["factor"]) + 1.0
        ratio = inv / plain
        print(f"  yarn: inv_freq / unscaled = {' '.join(f'{r:.4f}' for r in ratio)}; "
              f"attention factor {scaling:.6f}")
        assert np.allclose(inv, want, rtol=1e-6), (inv, want)
        assert abs(scaling - wantScaling) < 1e-6, scaling
        assert abs(ratio[0] - 1) < 1e-6 and abs(ratio[-1] - 1 / rs["factor"]) < 1e-6
        assert any(1 / rs["factor"] + 1e-3 < r < 1 - 1e-3 for r in ratio), "no ramp frequency"
    elif kind == "linear":
        assert np.allclose(inv, plain / rs["factor"], rtol=1e-6) and scaling == 1.0
        print(f"  linear: inv_freq = unscaled / {rs['factor']}")
    elif kind in ("default",):
        assert np.allclose(inv, plain, rtol=1e-6) and scaling == 1.0
    # dynamic and longrope are checked per row in the incremental report


def reportDynamic(spec, cfg, cases, ropes, diffs) -> None:
    rs = cfg["rope_scaling"]
    maxPos = cfg["max_position_embeddings"]
    headDim = cfg["hidden_size"] // cfg["num_attention_heads"]
    base0 = cfg["rope_theta"]
    def baseFor(seqLen):
        return base0 * ((rs["factor"] * seqLen / maxPos) - (rs["factor"] - 1)) ** (
            headDim / (headDim - 2))

    for case, rowRopes, diff in zip(cases, ropes, diffs):
        p = len(case["prompt_ids"])
        seqLens = []
        for r, (inv, scaling) in enumerate(rowRopes):
            # the sequence length the row's frequencies were computed for (prefill: P; decode
            # step at position r: r + 1), never below max_position_embeddings
            seqLen = max(p if r < p else r + 1, maxPos)
            want = 1.0 / baseFor(seqLen) ** (np.arange(0, headDim, 2, dtype=np.float64) / headDim)
            assert np.allclose(inv, want, rtol=1e-5), (case["logits_file"], r, inv, want)
            assert scaling == 1.0
            seqLens.append(seqLen)
        print(f"  dynamic {case['logits_file']}: rows' rope seq_len {seqLens[0]}..{seqLens[-1]} "
              f"(base {baseFor(seqLens[0]):.1f} -> {baseFor(seqLens[-1]):.1f}); "
              f"whole-sequence forward differs from the incremental rows by {diff:.3e}")
        if diff <= kMustDiffer:
            raise SystemExit(f"{spec.name}: whole-sequence and incremental differ by only {diff}")


def reportLongrope(spec, cfg, cases, ropes, diffs, genDiffs) -> str:
    rs = cfg["rope_scaling"]
    orig = cfg["original_max_position_embeddings"]
    factor = cfg["max_position_embeddings"] / orig
    wantScaling = math.sqrt(1 + math.log(factor) / math.log(orig))
    headDim = cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(headDim * cfg["partial_rotary_factor"])
    base = 1.0 / cfg["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    short = base / np.array(rs["short_factor"], dtype=np.float32).astype(np.float64)
    long = base / np.array(rs["long_factor"], dtype=np.float32).astype(np.float64)
    print(f"  longrope: rotary dim {dim} of {headDim}; attention factor sqrt(1 + ln {factor:g} / "
          f"ln {orig}) = {wantScaling:.6f}")
    print(f"    short inv_freq {np.array2string(short, precision=5)}")
    print(f"    long  inv_freq {np.array2string(long, precision=5)}")
    switched = False
    for case, rowRopes, diff, genDiff in zip(cases, ropes, diffs, genDiffs):
        p = len(case["prompt_ids"])
        kinds = []
        for r, (inv, scaling) in enumerate(rowRopes):
            seqLen = p if r < p else r + 1
            isLong = seqLen > orig
            assert np.allclose(inv, long if isLong else short, rtol=1e-6), (r, inv)
            assert abs(scaling - wantScaling) < 1e-6, scaling
            kinds.append("L" if isLong else "S")
        promptKinds, laterKinds = set(kinds[:p]), set(kinds[p:])
        note = ""
        if promptKinds == {"S"} and "L" in laterKinds:
            first = kinds.index("L")
            note = (f"SWITCH: prompt rows use short factors, rows {first}..{len(kinds) - 1} "
                    f"(positions >= {orig}) long; the cached keys of positions < {orig} keep "
                    f"their short rotation")
            switched = switched or (p > 1)
        print(f"  longrope {case['logits_file']}: P={p} rows {''.join(kinds)}; "
              f"{note or 'no switch'}; whole-sequence forward differs by {diff:.3e}; generate's "
              f"logits (cache dropped at the switch) by {genDiff:.3e}")
    if not switched:
        raise SystemExit(f"{spec.name}: no case switches from short to long factors mid-generation")
    return ("transformers' Phi3ForCausalLM.generate drops its KV cache the first time the "
            f"sequence reaches {orig + 1} tokens (original_max_position_embeddings + 1) and "
            "re-prefills all of it with the long factors; these rows keep the cache (keys of "
            f"positions < {orig} stay short-rotated), so from that step on generate's own logits "
            "differ from them (max |diff| per case, over the steps where both were fed the same "
            "ids: " + ", ".join(f"{d:.3g}" for d in genDiffs) + "); greedy_ids are the argmax of "
            "these rows, hf_generate_greedy_ids what generate returned")


def reportGemma2(spec, modelDir: str, goldenDir: str, cfg: dict, cases: list) -> str:
    """Checks on the golden sequences (prompt + greedy ids) that each Gemma 2 feature bites:
    the soft caps are clearly nonlinear there, and dropping any one feature (a cap, the +1 of the
    norms, the embedding scale, query_pre_attn_scalar) moves the golden rows far beyond the
    tolerance. Returns the summary stored as the golden's family_note."""
    attnCap, finalCap = cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"]
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    goldens = [np.fromfile(os.path.join(goldenDir, c["logits_file"]),
                           dtype="<f4").reshape(-1, fx.kVocab) for c in cases]

    model = loadModel(modelDir)
    for layer in model.model.layers:
        assert abs(layer.self_attn.scaling - scale) < 1e-12, layer.self_attn.scaling
        assert layer.self_attn.attn_logit_softcapping == attnCap
    assert model.config.final_logit_softcapping == finalCap
    embedScale = model.model.embed_tokens.embed_scale
    assert embedScale.dtype == torch.float32 and float(embedScale) == math.sqrt(64.0) == 8.0

    # attention scores (q.k * scale, before the cap) at the positions the mask lets through
    scores, preCap, embeds = {}, [], []
    original = gemma2_modeling.eager_attention_forward

    def probe(module, query, key, value, attention_mask, scaling=None, softcap=None, **kwargs):
        keys = gemma2_modeling.repeat_kv(key, module.num_key_value_groups)
        raw = torch.matmul(query, keys.transpose(2, 3)) * scaling
        visible = (attention_mask == 0).expand_as(raw)
        scores.setdefault(module.layer_idx, []).append(raw[visible].abs())
        return original(module, query, key, value, attention_mask, scaling=scaling,
                        softcap=softcap, **kwargs)

    hooks = [model.lm_head.register_forward_hook(lambda m, i, o: preCap.append(o[0].detach())),
             model.model.embed_tokens.register_forward_hook(
                 lambda m, i, o: embeds.append((i[0][0].clone(), o[0].detach())))]
    gemma2_modeling.eager_attention_forward = probe
    try:
        rows = [mlg.forwardLogits(model, ids) for ids in seqs]
    finally:
        gemma2_modeling.eager_attention_forward = original
        for h in hooks:
            h.remove()
    for r, g in zip(rows, goldens):
        assert np.array_equal(r, g), "probed forward differs from the golden rows"
    weight = model.model.embed_tokens.weight.detach()
    for ids, out in embeds:
        assert torch.equal(out, weight[ids] * torch.tensor(8.0, dtype=torch.float32))
    allScores = torch.cat([torch.cat(v) for v in scores.values()])
    pre = torch.cat([p.flatten() for p in preCap]).abs()
    attnRatio = float(allScores.max()) / attnCap
    attnFrac = float((allScores > attnCap).float().mean())
    finalRatio = float(pre.max()) / finalCap
    finalFrac = float((pre > finalCap).float().mean())
    perLayer = ", ".join(f"layer {i} {float(torch.cat(v).max()) / attnCap:.2f}"
                         for i, v in sorted(scores.items()))
    print(f"  attention scores (scaled by {cfg['query_pre_attn_scalar']}^-0.5, before the cap, "
          f"{allScores.numel()} visible): max |s| / cap {attnCap} = {attnRatio:.3f} "
          f"({perLayer}); {100 * attnFrac:.1f}% have |s| > cap")
    print(f"  final logits before the cap ({pre.numel()}): max |z| / cap {finalCap} = "
          f"{finalRatio:.3f}; {100 * finalFrac:.1f}% have |z| > cap; "
          f"rms {float(pre.pow(2).mean().sqrt()):.3f}")
    assert finalRatio > 1.5 and attnRatio > 1.0, (finalRatio, attnRatio)
    assert finalFrac > 0.02 and attnFrac > 0.05, (finalFrac, attnFrac)

    def maxDiff(mutated) -> float:
        return max(float(np.abs(mlg.forwardLogits(mutated, ids) - g).max())
                   for ids, g in zip(seqs, goldens))

    noPlusOne = loadModel(modelDir)
    with torch.no_grad():
        for name, param in noPlusOne.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(-1.0)  # 1 + (w - 1) = w: what a Llama-style x * w norm computes
    noEmbedScale = loadModel(modelDir)
    noEmbedScale.model.embed_tokens.embed_scale.fill_(1.0)
    mutations = {
        "no attention soft-cap": loadModel(modelDir, attn_logit_softcapping=None),
        "no final soft-cap": loadModel(modelDir, final_logit_softcapping=None),
        "norms x w instead of x (1 + w)": noPlusOne,
        "no sqrt(hidden) embedding scale": noEmbedScale,
        f"scale head_dim^-0.5 instead of {cfg['query_pre_attn_scalar']}^-0.5":
            loadModel(modelDir, query_pre_attn_scalar=cfg["head_dim"]),
    }
    effects = {}
    for what, mutated in mutations.items():
        effects[what] = maxDiff(mutated)
        print(f"    {what}: max |logits - golden| {effects[what]:.3f}")
        assert effects[what] > 100 * mlg.kTolerance, (what, effects[what])
    return (f"Gemma 2 checks on the golden sequences (prompt + greedy ids, eager attention): "
            f"attention scores q.k * {cfg['query_pre_attn_scalar']}^-0.5 before the cap reach "
            f"{attnRatio:.2f} x attn_logit_softcapping {attnCap} ({100 * attnFrac:.1f}% of the "
            f"visible ones exceed it); final logits before the cap reach {finalRatio:.2f} x "
            f"final_logit_softcapping {finalCap} ({100 * finalFrac:.1f}% exceed it). Embeddings "
            f"are multiplied by sqrt(hidden_size) = 8.0 as a float32 tensor (exact for hidden 64) "
            f"before layer 0. Max |logits - golden| when one feature is dropped: "
            + "; ".join(f"{k} {v:.3g}" for k, v in effects.items()))


# ---- Gemma 3 -----------------------------------------------------------------------------------

kGemma3PerLayer = sorted(f"{m}.weight" for m in (
    "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
    "post_feedforward_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
    "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj",
    "mlp.down_proj"))


def gemma3TextPrefix(spec) -> str:
    """Where the text weights sit in the written file: Gemma3ForCausalLM "model.",
    Gemma3ForConditionalGeneration "language_model.model." (transformers 5.24 saves the published
    layout: it reverts its load-time renaming to model.language_model.* on save)."""
    return "language_model.model." if spec.family == "gemma3mm" else "model."


def checkGemma3Layout(spec, modelDir: str, model) -> None:
    names = tensorNames(modelDir)
    with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(n).get_dtype() for n in names}
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in names}
        norms = {n: f.get_tensor(n) for n in names if n.endswith("norm.weight")}
    assert dtypes == {"F32"}, dtypes
    prefix = gemma3TextPrefix(spec)
    text = sorted(n for n in names if n.startswith(prefix))
    want = sorted([f"{prefix}embed_tokens.weight", f"{prefix}norm.weight"]
                  + [f"{prefix}layers.{i}.{n}" for i in range(spec.num_layers)
                     for n in kGemma3PerLayer])
    assert text == want, sorted(set(text) ^ set(want))
    other = sorted(set(names) - set(text))
    assert "lm_head.weight" not in names  # tied
    if spec.family == "gemma3":
        assert other == [], other
    else:
        assert all(n.startswith(("vision_tower.", "multi_modal_projector.")) for n in other), other
        # the file holds exactly what the model has (vision tower included), under these names
        assert {n for n, _ in model.named_parameters()} == (
            {"model.language_model." + n[len("language_model.model."):]
             if n.startswith("language_model.model.") else "model." + n for n in names}), \
            "state dict names"
    cfg = model.config.get_text_config()
    hd, h = cfg.head_dim, cfg.hidden_size
    assert shapes[f"{prefix}layers.0.self_attn.q_proj.weight"] == (cfg.num_attention_heads * hd, h)
    assert shapes[f"{prefix}layers.0.self_attn.k_proj.weight"] == (cfg.num_key_value_heads * hd, h)
    assert shapes[f"{prefix}layers.0.self_attn.o_proj.weight"] == (h, cfg.num_attention_heads * hd)
    assert shapes[f"{prefix}layers.0.self_attn.q_norm.weight"] == (hd,)
    assert shapes[f"{prefix}layers.0.self_attn.k_norm.weight"] == (hd,)
    # stored text norm weights are the offset from 1 (Gemma's RMSNorm multiplies by 1 + weight)
    byKey = {}
    for n, w in norms.items():
        if not n.startswith(prefix):
            continue
        key = ff.normKey("model." + n[len(prefix):])
        byKey.setdefault(key, []).append(w)
        bound = 4 * fx.kNormStd / math.sqrt(w.numel())  # 4 sigma of the mean
        assert abs(float(w.mean()) - ff.normCenter(spec, "model." + n[len(prefix):])) < bound, \
            (n, float(w.mean()))
        assert 0.05 < float(w.std()) < 0.2, (n, float(w.std()))
    print("  stored norm weights (multiplier 1 + w): " + ", ".join(
        f"{k} mean {float(torch.cat(v).mean()):+.3f} std {float(torch.cat(v).std()):.3f}"
        for k, v in sorted(byKey.items())))
    print(f"  safetensors tensors (name shape), text weights under {prefix!r}:")
    for n in text:
        if not n.startswith(f"{prefix}layers.") or n.startswith(f"{prefix}layers.0."):
            print(f"    {n} {list(shapes[n])}")
    print(f"    ... and the same {len(kGemma3PerLayer)} for layers 1..{spec.num_layers - 1}")
    if other:
        print(f"  vision tower / projector tensors ({len(other)}, kiln ignores them):")
        for n in other:
            print(f"    {n} {list(shapes[n])}")
    print(f"  tensors: {len(names)} ({len(text)} text)")


def checkGemma3Config(spec, cfg: dict, model) -> None:
    """The installed Gemma3TextConfig's defaults are the ones kGemma3TextDefaults assumes (so the
    sparse text_config means what the fixture intends), and the model got tiny-gemma3's values."""
    d = transformers.Gemma3TextConfig()
    mismatches = []
    for key, value in ff.kGemma3TextDefaults.items():
        if key == "rope_theta":
            got = d.rope_parameters["full_attention"]["rope_theta"]
        elif key == "rope_local_base_freq":
            got = d.rope_parameters["sliding_attention"]["rope_theta"]
        elif key == "rope_scaling":
            got = None if d.rope_parameters["full_attention"]["rope_type"] == "default" else "set"
        elif key == "sliding_window_pattern":
            got = d._sliding_window_pattern
            assert list(d.layer_types) == ff.gemma3LayerTypes(d.num_hidden_layers, value)
        elif key == "cache_implementation":
            continue  # a generation setting, not a Gemma3TextConfig field in 5.24
        else:
            got = getattr(d, key)
        if got != value:
            mismatches.append((key, value, got))
    assert not mismatches, mismatches
    full = ff.gemma3TextConfigDict(spec, "")
    t = model.config.get_text_config()
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_activation",
                "max_position_embeddings", "rms_norm_eps", "pad_token_id", "bos_token_id",
                "eos_token_id", "tie_word_embeddings", "query_pre_attn_scalar", "sliding_window",
                "attn_logit_softcapping", "final_logit_softcapping", "attention_bias",
                "layer_types"):
        assert getattr(t, key) == full[key], (key, getattr(t, key), full[key])
    if spec.family == "gemma3mm":
        print(f"  text_config names {sorted(cfg['text_config'])}; every other key comes from "
              "Gemma3TextConfig's defaults (kGemma3TextDefaults, checked against the installed "
              "class; the resulting config equals tiny-gemma3's)")


def checkGemma3Rope(spec, cfg: dict, model) -> None:
    """transformers 5 turns the 4.x keys into rope_parameters per layer type: rope_theta and
    rope_scaling -> full_attention, rope_local_base_freq -> sliding_attention (never scaled)."""
    checkGemma3Config(spec, cfg, model)
    t = model.config.get_text_config()
    rp = t.rope_parameters
    print(f"  rope_parameters (transformers' form of rope_theta / rope_scaling / "
          f"rope_local_base_freq): {json.dumps(rp, sort_keys=True)}")
    assert set(rp) == {"full_attention", "sliding_attention"}, rp
    assert rp["full_attention"]["rope_type"] == "linear" and rp["full_attention"]["factor"] == 8.0
    assert float(rp["full_attention"]["rope_theta"]) == 1e6
    assert rp["sliding_attention"]["rope_type"] == "default", rp
    assert set(rp["sliding_attention"]) == {"rope_type", "rope_theta"}, rp
    assert float(rp["sliding_attention"]["rope_theta"]) == 1e4
    rot = textModelOf(model).rotary_emb
    hd = t.head_dim
    i = np.arange(0, hd, 2, dtype=np.float64) / hd
    want = {"full_attention": 1.0 / 1e6 ** i / 8.0, "sliding_attention": 1.0 / 1e4 ** i}
    for kind, w in want.items():
        inv = getattr(rot, f"{kind}_inv_freq").detach().double().numpy()
        assert np.allclose(inv, w, rtol=1e-6), (kind, inv, w)
        assert getattr(rot, f"{kind}_attention_scaling") == 1.0
    print(f"  inv_freq: full_attention (layer 5) = theta 1e6 unscaled / 8 "
          f"[{want['full_attention'][0]:.4g} .. {want['full_attention'][-1]:.3g}], "
          f"sliding_attention (layers 0-4) = theta 1e4 "
          f"[{want['sliding_attention'][0]:.4g} .. {want['sliding_attention'][-1]:.3g}]; "
          f"attention scaling 1.0 for both")


def gemma3MaskHook(kind: str, window: int, check: bool):
    """Forward pre-hook on a decoder layer giving it the causal (full_attention) or windowed
    (sliding_attention) additive mask; with check, asserts the mask it was given is that one."""
    def hook(module, args, kwargs):
        mask = kwargs["attention_mask"]
        q, k = mask.shape[-2:]
        i = torch.arange(q)[:, None] + (k - q)
        j = torch.arange(k)[None, :]
        visible = (j <= i) if kind == "full_attention" else ((j <= i) & (j > i - window))
        built = torch.where(visible, 0.0, torch.finfo(mask.dtype).min).to(mask.dtype)
        built = built.expand_as(mask)
        if check:
            assert torch.equal(built, mask), (module.layer_idx, kind)
            return None
        kwargs["attention_mask"] = built
        return args, kwargs
    return hook


def gemma3ForwardWithMasks(model, ids: list[int], kinds: list[str], window: int,
                           check: bool) -> np.ndarray:
    hooks = [layer.register_forward_pre_hook(gemma3MaskHook(kind, window, check),
                                             with_kwargs=True)
             for layer, kind in zip(textModelOf(model).layers, kinds)]
    try:
        return mlg.forwardLogits(model, ids)
    finally:
        for h in hooks:
            h.remove()


def checkGemma3Window(spec, modelDir: str, model, ids: list[int]) -> None:
    """Gemma 3's 5 local : 1 global pattern. transformers 5 reads config.layer_types (tiny-gemma3
    writes it; tiny-gemma3-mm's sparse text_config has neither it nor sliding_window_pattern, and
    Gemma3TextConfig derives the same list from its default pattern 6). The window applies on the
    sliding layers only: key j is visible to query i iff i - window < j <= i."""
    t = model.config.get_text_config()
    window, n = t.sliding_window, t.num_hidden_layers
    pattern = ff.gemma3LayerTypes(n)
    assert window == 6 and list(t.layer_types) == pattern, (window, t.layer_types)
    full = ff.gemma3TextConfigDict(spec, "")
    noKey = transformers.Gemma3TextConfig(**{k: v for k, v in full.items()
                                             if k not in ("layer_types", "sliding_window_pattern")})
    assert list(noKey.layer_types) == pattern, noKey.layer_types
    got = [layer.self_attn.sliding_window for layer in textModelOf(model).layers]
    assert got == [window if k == "sliding_attention" else None for k in pattern], got
    # the masks transformers gives each layer are exactly the ones described above
    windowed = gemma3ForwardWithMasks(model, ids, pattern, window, check=True)
    assert np.array_equal(windowed, mlg.forwardLogits(model, ids))
    print(f"  layer_types {pattern} (also Gemma3TextConfig's default without the key); "
          f"per-layer window {got}")
    first, worst = firstDiffRow(windowed, gemma3ForwardWithMasks(
        model, ids, ["full_attention"] * n, window, check=False))
    print(f"  sliding_window {window}: over {len(ids)} tokens the forward differs from one with "
          f"full attention on every layer (ropes unchanged) from row {first} on "
          f"(max {worst:.3f})")
    assert first == window, (first, window)
    for i in range(n):
        flipped = list(pattern)
        flipped[i] = "full_attention" if pattern[i] == "sliding_attention" else \
            "sliding_attention"
        first, worst = firstDiffRow(windowed, gemma3ForwardWithMasks(model, ids, flipped, window,
                                                                     check=False))
        print(f"    layer {i} given the {flipped[i]} mask (its rope kept): differs from row "
              f"{first} on (max {worst:.3f})")
        assert first == window, (i, first, window)


def gemma3Mutations(modelDir: str, textCfg) -> dict:
    """Each: a fresh copy of the model with one Gemma 3 feature dropped or swapped."""
    hd = textCfg.head_dim
    plain1e6 = torch.tensor(1.0 / 1e6 ** (np.arange(0, hd, 2, dtype=np.float64) / hd),
                            dtype=torch.float32)

    def mutated(change):
        model = loadModel(modelDir)
        text = textModelOf(model)
        with torch.no_grad():
            change(text, text.rotary_emb)
        return model

    def normsMinusOne(text, rot, which):
        for name, param in text.named_parameters():
            if name.endswith("norm.weight") and which(name):
                param.add_(-1.0)  # 1 + (w - 1) = w: what a Llama-style x * w norm computes

    def dropQkNorm(text, rot):
        for layer in text.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()

    def setScaling(text, rot):
        for layer in text.layers:
            layer.self_attn.scaling = hd ** -0.5

    def noWindow(text, rot):
        text.config.sliding_window = 10 ** 6

    scalar = textCfg.query_pre_attn_scalar
    return {
        "local layers with the global rope (theta 1e6, linear 8)": mutated(
            lambda t, r: r.sliding_attention_inv_freq.copy_(r.full_attention_inv_freq)),
        "global layer with the local rope (theta 1e4, unscaled)": mutated(
            lambda t, r: r.full_attention_inv_freq.copy_(r.sliding_attention_inv_freq)),
        "local layers with rope_theta 1e6 (rope_local_base_freq ignored)": mutated(
            lambda t, r: r.sliding_attention_inv_freq.copy_(plain1e6)),
        "no linear scaling (global layer theta 1e6 unscaled)": mutated(
            lambda t, r: r.full_attention_inv_freq.copy_(plain1e6)),
        "linear scaling on the local layers too": mutated(
            lambda t, r: r.sliding_attention_inv_freq.div_(8.0)),
        "q_norm / k_norm x w instead of x (1 + w)": mutated(
            lambda t, r: normsMinusOne(t, r, lambda n: "q_norm" in n or "k_norm" in n)),
        "no q_norm / k_norm": mutated(dropQkNorm),
        "all norms x w instead of x (1 + w)": mutated(
            lambda t, r: normsMinusOne(t, r, lambda n: True)),
        "no sqrt(hidden) embedding scale": mutated(
            lambda t, r: t.embed_tokens.embed_scale.fill_(1.0)),
        f"scale head_dim^-0.5 instead of {scalar}^-0.5": mutated(setScaling),
        "no sliding window (every layer full)": mutated(noWindow),
    }


def checkGemma3TextEquivalence(modelDir: str, seqs, goldens) -> float:
    """tiny-gemma3-mm: Gemma3ForCausalLM built from text_config with the language model's weights
    gives the same logits as Gemma3ForConditionalGeneration's text-only forward."""
    mm = loadModel(modelDir)
    textCfg = copy.deepcopy(mm.config.get_text_config())
    textCfg.architectures = ["Gemma3ForCausalLM"]
    lm = AutoModelForCausalLM.from_config(textCfg, dtype=torch.float32,
                                          attn_implementation="eager").eval()
    assert type(lm).__name__ == "Gemma3ForCausalLM", type(lm).__name__
    missing = lm.model.load_state_dict(textModelOf(mm).state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    assert lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()  # tied
    return max(float(np.abs(mlg.forwardLogits(lm, ids) - g).max())
               for ids, g in zip(seqs, goldens))


def checkGemma3PublishedLayout(modelDir: str, seqs, goldens) -> str:
    """google/gemma-3-4b-it names its tensors language_model.model.*, vision_tower.vision_model.*
    and multi_modal_projector.*; transformers 5.24 writes language_model.model.* too but drops
    SigLIP's "vision_model." (its CLIPVisionModel PrefixChange is not reverted on save). A copy
    with the published names loads into the same model (no missing / unexpected keys) and gives
    the golden rows."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(os.path.join(modelDir, "model.safetensors"))
    renamed = {("vision_tower.vision_model." + n[len("vision_tower."):]
                if n.startswith("vision_tower.") else n): v for n, v in tensors.items()}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(modelDir, "config.json"), tmp)
        save_file(renamed, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model, info = AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        model.eval()
        bad = {k: v for k, v in info.items() if v}
        assert not bad, bad
        diff = max(float(np.abs(mlg.forwardLogits(model, ids) - g).max())
                   for ids, g in zip(seqs, goldens))
    assert diff == 0.0, diff
    vision = sorted(n for n in renamed if n.startswith("vision_tower."))
    print(f"  published layout (vision_tower.vision_model.*, e.g. {vision[0]}): loads with no "
          f"missing / unexpected keys, logits equal the golden rows")
    return vision[0]


def checkGemma3Vision(modelDir: str, outer: dict) -> None:
    """The vision config is consistent: an image prompt runs through the tower and projector, and
    the image features reach the image-token rows."""
    model = loadModel(modelDir)
    k = outer["mm_tokens_per_image"]
    ids = [fx.kBos, outer["boi_token_index"]] + [outer["image_token_index"]] * k + \
        [outer["eoi_token_index"], 17]
    size = outer["vision_config"]["image_size"]
    pixels = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        withImage = model(torch.tensor([ids]), pixel_values=pixels, use_cache=False).logits[0]
    textOnly = torch.from_numpy(mlg.forwardLogits(model, ids))
    diff = (withImage - textOnly).abs().max(dim=-1).values
    assert torch.isfinite(withImage).all()
    assert float(diff[:2].max()) == 0.0 and float(diff[2:].min()) > 1e-3, diff
    print(f"  vision smoke test: {size} x {size} image -> {k} image tokens; rows from the first "
          f"image token on differ from the text-only forward of the same ids (min "
          f"{float(diff[2:].min()):.3f}), rows before it are equal")


def reportGemma3(spec, modelDir: str, goldenDir: str, cases: list) -> str:
    """Checks on the golden sequences (prompt + greedy ids) that each Gemma 3 feature bites:
    swapping the local / global ropes, dropping the linear scaling, the +1 of the q/k norms, the
    q/k norms, query_pre_attn_scalar etc. each move the golden rows far beyond the tolerance.
    Returns the summary stored as the golden's family_note."""
    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    goldens = [np.fromfile(os.path.join(goldenDir, c["logits_file"]),
                           dtype="<f4").reshape(-1, fx.kVocab) for c in cases]
    model = loadModel(modelDir)
    textCfg = model.config.get_text_config()
    text = textModelOf(model)
    scale = textCfg.query_pre_attn_scalar ** -0.5
    for layer in text.layers:
        assert abs(layer.self_attn.scaling - scale) < 1e-12, layer.self_attn.scaling
    embedScale = text.embed_tokens.embed_scale
    assert embedScale.dtype == torch.float32 and float(embedScale) == math.sqrt(64.0) == 8.0
    for ids, g in zip(seqs, goldens):
        assert np.array_equal(mlg.forwardLogits(model, ids), g), "reload differs from the golden"
    for name, param in text.named_parameters():
        if "q_norm" in name or "k_norm" in name:
            w = param.detach()
            assert float(w.abs().max()) > 0.1 and float(w.std()) > 0.05, name

    effects = {}
    for what, mutated in gemma3Mutations(modelDir, textCfg).items():
        effects[what] = max(float(np.abs(mlg.forwardLogits(mutated, ids) - g).max())
                            for ids, g in zip(seqs, goldens))
        print(f"    {what}: max |logits - golden| {effects[what]:.3f}")
        assert effects[what] > 100 * mlg.kTolerance, (what, effects[what])
    note = ("Gemma 3 checks on the golden sequences (prompt + greedy ids, eager attention): "
            f"attention scale {textCfg.query_pre_attn_scalar}^-0.5; embeddings x sqrt(64) = 8.0 "
            "as a float32 tensor; layers 0-4 sliding (window 6, rope theta 1e4), layer 5 full "
            "(rope theta 1e6, linear factor 8). Max |logits - golden| when one feature is dropped "
            "or swapped: " + "; ".join(f"{k} {v:.3g}" for k, v in effects.items()))
    if spec.family == "gemma3mm":
        same = checkGemma3TextEquivalence(modelDir, seqs, goldens)
        print(f"  Gemma3ForCausalLM from text_config with the language model's weights: max "
              f"|logits - golden| {same:.3g}")
        assert same == 0.0, same
        visionName = checkGemma3PublishedLayout(modelDir, seqs, goldens)
        checkGemma3Vision(modelDir, spec.outer)
        note = ("Text-only forward of Gemma3ForConditionalGeneration (input_ids only, no "
                "pixel_values); Gemma3ForCausalLM built from text_config with the "
                "language_model.model.* weights gives these rows exactly (max |diff| 0). The "
                f"same checkpoint with the published vision names ({visionName} etc.) loads "
                "identically. " + note)
    return note


# ---- mixture of experts ------------------------------------------------------------------------

# Every token of the golden sequences, on every sparse layer: its k-th largest router logit leads
# the (k+1)-th by more than this, so an engine whose router logits are within fp32 rounding of
# transformers' picks the same experts (a golden whose routing flips under a 1e-6 perturbation
# would test nothing stable).
kMinRouterGap = 1e-3


def moeShape(cfg: dict) -> tuple[int, int, int]:
    """(experts, top-k, expert width) of a mixtral / qwen3_moe / qwen2_moe config.json (Qwen2-MoE's
    shared expert, of shared_expert_intermediate_size, is not counted)."""
    if cfg["model_type"] == "mixtral":
        return cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"]
    return cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]


def renormalises(cfg: dict) -> bool:
    """Mixtral always divides the top-k softmax weights by their sum; Qwen3-MoE and Qwen2-MoE iff
    norm_topk_prob (both configs default to false; Qwen3-30B-A3B and tiny-qwen3-moe say true,
    Qwen1.5-MoE-A2.7B and tiny-qwen2-moe false)."""
    return cfg["model_type"] == "mixtral" or bool(cfg.get("norm_topk_prob", False))


def sparseLayers(cfg: dict) -> list[int]:
    """The layers with a sparse MoE block. Mixtral: all. Qwen3-MoE and Qwen2-MoE
    (Qwen3MoeDecoderLayer.__init__ / Qwen2MoeDecoderLayer.__init__ in transformers 5.24):
    `layer_idx not in mlp_only_layers and num_experts > 0 and (layer_idx + 1) %
    decoder_sparse_step == 0`; the others get a dense SwiGLU of intermediate_size."""
    n = cfg["num_hidden_layers"]
    if cfg["model_type"] == "mixtral":
        return list(range(n))
    return [i for i in range(n) if i not in cfg.get("mlp_only_layers", [])
            and cfg["num_experts"] > 0 and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0]


# Per-expert tensor names of the published checkpoints (mistralai/Mixtral-8x7B-*: w1 gate, w3 up,
# w2 down under block_sparse_moe; Qwen/Qwen3-*-A*B and Qwen/Qwen1.5-MoE-A2.7B: gate_proj / up_proj /
# down_proj under mlp)
# -> (which fused tensor of transformers 5 holds it, which half of gate_up_proj: 0 gate, 1 up)
kExpertNames = {
    "mixtral": ("block_sparse_moe", {"w1": ("gate_up_proj", 0), "w3": ("gate_up_proj", 1),
                                     "w2": ("down_proj", None)}),
    "qwen3_moe": ("mlp", {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
                          "down_proj": ("down_proj", None)}),
    "qwen2_moe": ("mlp", {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
                          "down_proj": ("down_proj", None)}),
}


def publishedMoeTensors(spec, cfg: dict) -> dict[str, tuple]:
    """Every tensor of the published per-expert layout, name -> shape (Qwen2-MoE: also the q/k/v
    biases and, on each sparse layer, the shared expert and its gate)."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // heads)
    experts, _, width = moeShape(cfg)
    block, names = kExpertNames[spec.family]
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not spec.tied:
        out["lm_head.weight"] = (v, h)
    sparse = sparseLayers(cfg)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (heads * hd, h),
                    p + "self_attn.k_proj.weight": (kv * hd, h),
                    p + "self_attn.v_proj.weight": (kv * hd, h),
                    p + "self_attn.o_proj.weight": (h, heads * hd)})
        if spec.family == "qwen3_moe":
            out.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if spec.family == "qwen2_moe":
            out.update({p + "self_attn.q_proj.bias": (heads * hd,),
                        p + "self_attn.k_proj.bias": (kv * hd,),
                        p + "self_attn.v_proj.bias": (kv * hd,)})
        if i not in sparse:
            inter = cfg["intermediate_size"]
            out.update({p + "mlp.gate_proj.weight": (inter, h),
                        p + "mlp.up_proj.weight": (inter, h),
                        p + "mlp.down_proj.weight": (h, inter)})
            continue
        out[p + f"{block}.gate.weight"] = (experts, h)
        if spec.family == "qwen2_moe":
            shared = cfg["shared_expert_intermediate_size"]
            out.update({p + "mlp.shared_expert.gate_proj.weight": (shared, h),
                        p + "mlp.shared_expert.up_proj.weight": (shared, h),
                        p + "mlp.shared_expert.down_proj.weight": (h, shared),
                        p + "mlp.shared_expert_gate.weight": (1, h)})
        for x in range(experts):
            for name, (fused, _) in names.items():
                out[p + f"{block}.experts.{x}.{name}.weight"] = \
                    (h, width) if fused == "down_proj" else (width, h)
    return out


def fusedSourceOf(spec, name: str, params: dict, width: int) -> torch.Tensor:
    """The value a published tensor must have, taken from transformers' in-memory (fused)
    parameters: mlp.experts.gate_up_proj[x] = cat(gate, up) along rows, down_proj[x] = down; every
    other tensor (Qwen2-MoE's shared expert and its gate included) under its own name."""
    block, names = kExpertNames[spec.family]
    parts = name.split(".")
    if parts[:2] != ["model", "layers"]:
        return params[name]
    if parts[3] == block and parts[4] == "experts":
        fused, half = names[parts[6]]
        t = params[".".join(parts[:3] + ["mlp", "experts", fused])][int(parts[5])]
        return t if half is None else t[half * width:(half + 1) * width]
    if parts[3] == block and parts[4] == "gate":
        return params[".".join(parts[:3] + ["mlp", "gate", "weight"])]
    return params[name]


def checkMoeLayout(spec, modelDir: str, model) -> None:
    """model.safetensors holds exactly the published per-expert layout (what transformers 5.24's
    save_pretrained writes: it reverts the load-time merge of the per-expert tensors), each tensor
    equal to the slice of the fused parameter initWeights drew; transformers loads it with no
    missing / unexpected keys into the same fused parameters."""
    cfg = ff.configDict(spec, "")
    experts, topK, width = moeShape(cfg)
    want = publishedMoeTensors(spec, cfg)
    names = tensorNames(modelDir)
    with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(n).get_dtype() for n in names}
        shapes = {n: tuple(f.get_slice(n).get_shape()) for n in names}
        tensors = {n: f.get_tensor(n) for n in names}
    assert dtypes == {"F32"}, dtypes
    assert sorted(names) == sorted(want), sorted(set(names) ^ set(want))
    assert all(shapes[n] == want[n] for n in names), [n for n in names if shapes[n] != want[n]]

    drawnModel = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
    ff.initWeights(spec, drawnModel)
    drawn = {n: p.detach() for n, p in drawnModel.named_parameters()}
    for n in names:
        assert torch.equal(tensors[n], fusedSourceOf(spec, n, drawn, width)), n
    loaded, info = AutoModelForCausalLM.from_pretrained(modelDir, dtype=torch.float32,
                                                        output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, bad
    got = dict(loaded.named_parameters())
    assert sorted(got) == sorted(drawn) and all(torch.equal(got[n], drawn[n]) for n in drawn)

    sparse = sparseLayers(cfg)
    kinds = []
    h = cfg["hidden_size"]
    for i, layer in enumerate(model.model.layers):
        isSparse = hasattr(layer.mlp, "experts")
        assert isSparse == (i in sparse), (i, type(layer.mlp).__name__)
        if isSparse:
            assert layer.mlp.gate.top_k == topK and layer.mlp.experts.num_experts == experts
            assert tuple(layer.mlp.experts.gate_up_proj.shape) == (experts, 2 * width, h)
            assert tuple(layer.mlp.experts.down_proj.shape) == (experts, h, width)
        kinds.append(f"{i} {type(layer.mlp).__name__}")
    if spec.family == "qwen3_moe":
        qn = model.model.layers[0].self_attn.q_norm.weight.detach()
        assert qn.shape[0] == cfg["head_dim"] and float((qn - 1).abs().max()) > 0.05
    if spec.family == "qwen2_moe":
        shared = cfg["shared_expert_intermediate_size"]
        for i, layer in enumerate(model.model.layers):
            att = layer.self_attn
            assert att.o_proj.bias is None
            for proj in (att.q_proj, att.k_proj, att.v_proj):
                assert proj.bias is not None and float(proj.bias.detach().std()) > 0.05, i
            if i in sparse:
                se = layer.mlp.shared_expert
                assert (se.gate_proj.out_features, se.up_proj.out_features,
                        se.down_proj.in_features) == (shared, shared, shared)
                assert tuple(layer.mlp.shared_expert_gate.weight.shape) == (1, h)
                assert layer.mlp.shared_expert_gate.bias is None
        print(f"  q/k/v biases on every layer (o_proj none), drawn N(0, {fx.kWeightStd}); sparse "
              f"layers also hold mlp.shared_expert (SwiGLU of width {shared}) and "
              f"mlp.shared_expert_gate [1, {h}] (no bias)")
    print(f"  layers' MLPs: {', '.join(kinds)} (sparse layers {sparse})")
    byRole = {v: k for k, v in kExpertNames[spec.family][1].items()}
    print(f"  safetensors tensors (name shape), published per-expert layout "
          f"({len(names)} tensors):")
    for n in names:
        if not n.startswith("model.layers."):
            print(f"    {n} {list(shapes[n])}")
    for i in range(cfg["num_hidden_layers"]):
        kind = "sparse" if i in sparse else "dense"
        like = next((j for j in range(i) if (j in sparse) == (i in sparse)), None)
        if like is not None:
            print(f"    model.layers.{i}.* ({kind}): the same names and shapes as layer {like}")
            continue
        for n in names:
            parts = n.split(".")
            if parts[:3] != ["model", "layers", str(i)] or (parts[4:5] == ["experts"]
                                                            and parts[5] != "0"):
                continue
            more = f"   (and experts.1..{experts - 1})" if parts[4:5] == ["experts"] else ""
            print(f"    {n} {list(shapes[n])}{more}")
    print(f"  each expert tensor equals its slice of transformers' fused parameter as drawn "
          f"(mlp.experts.gate_up_proj [{experts}, {2 * width}, {h}]: per expert rows "
          f"0..{width - 1} {byRole[('gate_up_proj', 0)]} | rows {width}..{2 * width - 1} "
          f"{byRole[('gate_up_proj', 1)]}; mlp.experts.down_proj [{experts}, {h}, {width}] = "
          f"{byRole[('down_proj', None)]}); from_pretrained: no missing / unexpected keys, "
          f"parameters equal those drawn")


def routerCapture(model):
    """Forward hooks on every sparse layer's router: {layer: [(logits, weights, indices), ...]}
    (transformers' TopKRouter.forward returns exactly these)."""
    store, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "experts"):
            hooks.append(layer.mlp.gate.register_forward_hook(
                lambda m, args, out, i=i: store.setdefault(i, []).append(
                    tuple(t.detach().clone() for t in out))))
    return store, hooks


def routingStats(model, seqs: list[list[int]], cfg: dict) -> dict:
    """Runs the golden sequences, checks transformers' routing against an independent float64
    rendering of the rule (softmax over all router logits, top-k, renormalised when the family
    does) and gathers the per-layer statistics of the decisions."""
    experts, topK, _ = moeShape(cfg)
    store, hooks = routerCapture(model)
    try:
        rows = [mlg.forwardLogits(model, ids) for ids in seqs]
    finally:
        for h in hooks:
            h.remove()
    stats = {}
    for layer, calls in sorted(store.items()):
        logits = torch.cat([c[0] for c in calls]).double()
        weights = torch.cat([c[1] for c in calls]).double()
        indices = torch.cat([c[2] for c in calls])
        probs = torch.softmax(logits, dim=-1)
        refW, refIdx = torch.topk(probs, topK, dim=-1)
        if renormalises(cfg):
            refW = refW / refW.sum(dim=-1, keepdim=True)
        assert torch.equal(refIdx, indices), layer
        wDiff = float((refW - weights).abs().max())
        assert wDiff < 1e-6, (layer, wDiff)
        sortedLogits = torch.sort(logits, dim=-1, descending=True).values
        sortedProbs = torch.sort(probs, dim=-1, descending=True).values
        gap = sortedLogits[:, topK - 1] - sortedLogits[:, topK]
        probGap = sortedProbs[:, topK - 1] - sortedProbs[:, topK]
        stats[layer] = {
            "tokens": int(logits.shape[0]),
            "uses": torch.bincount(indices.flatten(), minlength=experts).tolist(),
            "min_gap": float(gap.min()), "median_gap": float(gap.median()),
            "frac_gap_below_0.01": float((gap < 0.01).double().mean()),
            "min_prob_gap": float(probGap.min()), "median_prob_gap": float(probGap.median()),
            "top_weight": (float(weights[:, 0].min()), float(weights[:, 0].mean()),
                           float(weights[:, 0].max())),
            "logit_std": float(logits.std()), "weight_diff": wDiff}
    return {"rows": rows, "layers": stats}


def patchRouters(model, topK: int | None = None, renorm: bool = True,
                 softmaxOfTopLogits: bool = False):
    """Replaces every sparse layer's router with a re-implementation: softmax over all router
    logits, top-k, divided by the sum when renorm -- or, with softmaxOfTopLogits, the top-k
    logits first and a softmax over just those (Mistral's reference form; algebraically the same
    as the renormalised one)."""
    for layer in model.model.layers:
        if not hasattr(layer.mlp, "experts"):
            continue
        gate = layer.mlp.gate
        k = gate.top_k if topK is None else topK

        def forward(hidden, gate=gate, k=k):
            hidden = hidden.reshape(-1, gate.hidden_dim)
            logits = torch.nn.functional.linear(hidden, gate.weight)
            if softmaxOfTopLogits:
                top, idx = torch.topk(logits, k, dim=-1)
                w = torch.softmax(top.float(), dim=-1)
            else:
                w, idx = torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1)
                if renorm:
                    w = w / w.sum(dim=-1, keepdim=True)
            return logits, w.to(logits.dtype), idx

        gate.forward = forward
    return model


class ZeroMlp(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


class ConstantLogit(torch.nn.Module):
    """A stand-in for Qwen2-MoE's shared_expert_gate: the same logit for every token (+inf: the
    sigmoid is exactly 1, the shared expert ungated)."""
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, x):
        return torch.full(x.shape[:-1] + (1,), self.value, dtype=x.dtype)


def reimplementSharedExpert(model):
    """Qwen2-MoE: every sparse block's forward re-implemented from its raw weights (the routed sum
    from transformers' router and experts, both checked separately) plus
    sigmoid(x . shared_expert_gate) * down(silu(gate x) * up x)."""
    for layer in model.model.layers:
        if not hasattr(layer.mlp, "experts"):
            continue
        block = layer.mlp

        def forward(hidden, block=block):
            shape = hidden.shape
            x = hidden.reshape(-1, shape[-1])
            _, w, idx = block.gate(x)
            routed = block.experts(x, idx, w)
            se = block.shared_expert
            inner = torch.nn.functional.silu(x @ se.gate_proj.weight.T) * (x @ se.up_proj.weight.T)
            gate = torch.sigmoid(x @ block.shared_expert_gate.weight.T)
            return (routed + gate * (inner @ se.down_proj.weight.T)).reshape(shape)

        block.forward = forward
    return model


def sharedGateStats(model, seqs: list[list[int]]) -> dict:
    """Qwen2-MoE: sigmoid(shared_expert_gate(x)) of every token of the golden sequences, per sparse
    layer: (min, mean, max, std)."""
    store, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "shared_expert_gate"):
            hooks.append(layer.mlp.shared_expert_gate.register_forward_hook(
                lambda m, args, out, i=i: store.setdefault(i, []).append(
                    torch.sigmoid(out.detach().double()).flatten())))
    try:
        for ids in seqs:
            mlg.forwardLogits(model, ids)
    finally:
        for h in hooks:
            h.remove()
    return {i: (float(torch.cat(v).min()), float(torch.cat(v).mean()), float(torch.cat(v).max()),
                float(torch.cat(v).std())) for i, v in sorted(store.items())}


def moeMutations(spec, modelDir: str, cfg: dict) -> tuple[dict, dict, str]:
    """(same, changed, loadNote): models that must reproduce the golden (rule re-implemented,
    Mistral's softmax-of-top-k form, the grouped_mm experts, Qwen2-MoE's shared expert
    re-implemented) and models with one MoE feature dropped or swapped."""
    experts, topK, _ = moeShape(cfg)
    same = {
        f"router re-implemented (softmax, top-{topK}, renormalised)" if renormalises(cfg) else
        f"router re-implemented (softmax, top-{topK})": patchRouters(
            loadModel(modelDir), renorm=renormalises(cfg)),
        f"softmax over the top-{topK} logits (Mistral's reference form)": patchRouters(
            loadModel(modelDir), softmaxOfTopLogits=True),
        "experts_implementation grouped_mm (transformers' default)": loadModel(
            modelDir, experts_implementation="grouped_mm"),
    }
    if not renormalises(cfg):
        del same[f"softmax over the top-{topK} logits (Mistral's reference form)"]
    if spec.family == "qwen2_moe":
        same["shared expert re-implemented (sigmoid(x . shared_expert_gate) x SwiGLU, added to "
             "the routed sum)"] = reimplementSharedExpert(loadModel(modelDir))
    changed, loadNote = {}, ""
    if spec.family == "mixtral":
        changed[f"no renormalisation (top-{topK} softmax probabilities as weights)"] = \
            patchRouters(loadModel(modelDir), renorm=False)
    elif renormalises(cfg):
        changed[f"norm_topk_prob false (top-{topK} softmax probabilities as weights)"] = loadModel(
            modelDir, norm_topk_prob=False)
    else:
        changed[f"norm_topk_prob true (top-{topK} weights renormalised to sum 1)"] = loadModel(
            modelDir, norm_topk_prob=True)
    changed["top-1 instead of top-%d (one expert, weight 1)" % topK] = patchRouters(
        loadModel(modelDir), topK=1)
    changed["top-1 without renormalisation (weight = its softmax probability)"] = patchRouters(
        loadModel(modelDir), topK=1, renorm=False)
    if renormalises(cfg):
        changed[f"top-{topK + 1} instead of top-{topK} (renormalised)"] = patchRouters(
            loadModel(modelDir), topK=topK + 1)
    else:
        changed[f"top-{topK + 1} instead of top-{topK} (softmax probabilities as weights)"] = \
            patchRouters(loadModel(modelDir), topK=topK + 1, renorm=False)
    dense = [i for i in range(cfg["num_hidden_layers"]) if i not in sparseLayers(cfg)]
    if dense:
        # an importer that ignores the dense-layer rule builds a sparse block for a dense layer:
        # the file has no router / experts (/ shared expert) for it (missing) and a dense MLP it
        # does not expect. Qwen3-MoE's rule here is mlp_only_layers, Qwen2-MoE's
        # decoder_sparse_step: load with the one that makes every layer sparse.
        if cfg.get("mlp_only_layers"):
            rule, override, ruleNote = "mlp_only_layers", {"mlp_only_layers": []}, \
                "mlp_only_layers []"
        else:
            rule, override, ruleNote = "decoder_sparse_step", {"decoder_sparse_step": 1}, \
                "decoder_sparse_step 1"
        torch.manual_seed(0)  # transformers initialises the missing router / experts
        asMoe, info = AutoModelForCausalLM.from_pretrained(
            modelDir, dtype=torch.float32, attn_implementation="eager",
            experts_implementation="eager", output_loading_info=True, **override)
        missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
        blockParams = ["gate.weight", "experts.gate_up_proj", "experts.down_proj"]
        if spec.family == "qwen2_moe":
            blockParams += [f"shared_expert.{n}_proj.weight" for n in ("gate", "up", "down")] + \
                ["shared_expert_gate.weight"]
        wantMissing = sorted(f"model.layers.{i}.mlp.{n}" for i in dense for n in blockParams)
        wantUnexpected = sorted(f"model.layers.{i}.mlp.{n}_proj.weight" for i in dense
                                for n in ("gate", "up", "down"))
        assert missing == wantMissing and unexpected == wantUnexpected, (missing, unexpected)
        which = f"layer {dense[0]}" if len(dense) == 1 else f"layers {dense}"
        loadNote = (f"loading with {ruleNote} ({'layer' if len(dense) == 1 else 'layers'} "
                    f"{dense} built sparse) reports missing {missing} and unexpected {unexpected}")
        print(f"  {loadNote}")
        changed[f"{which} treated as MoE ({rule} ignored; "
                + ("its" if len(dense) == 1 else "their")
                + " router / experts as transformers initialises the missing ones, seed 0)"] = \
            asMoe.eval()
        skipped = loadModel(modelDir)
        for i in dense:
            skipped.model.layers[i].mlp = ZeroMlp()
        changed[f"{which}'s dense MLP skipped"] = skipped
    if spec.family == "qwen2_moe":
        noShared = loadModel(modelDir)
        ungated = loadModel(modelDir)
        for i in sparseLayers(cfg):
            noShared.model.layers[i].mlp.shared_expert = ZeroMlp()
            ungated.model.layers[i].mlp.shared_expert_gate = ConstantLogit(float("inf"))
        changed["no shared expert (routed experts only)"] = noShared
        changed["shared expert ungated (sigmoid gate replaced by 1)"] = ungated
        noBias = loadModel(modelDir)
        with torch.no_grad():
            for layer in noBias.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                             layer.self_attn.v_proj):
                    proj.bias.zero_()
        changed["q/k/v biases zeroed"] = noBias
    if spec.family == "qwen3_moe":
        noQk = loadModel(modelDir)
        for layer in noQk.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()
        changed["no q_norm / k_norm"] = noQk
    return same, changed, loadNote


def reportMoe(spec, modelDir: str, goldenDir: str, cfg: dict, cases: list) -> str:
    """Routing checks on the golden sequences (prompt + greedy ids): transformers' decisions equal
    the family's rule computed independently in float64; every expert of every sparse layer is
    chosen at least once; the k-th / (k+1)-th router logit gap exceeds kMinRouterGap for every
    token and layer; flipping renormalisation, changing top-k or the dense layers, and (Qwen2-MoE)
    dropping the shared expert, its sigmoid gate or the q/k/v biases moves the golden rows far
    beyond the tolerance; Qwen2-MoE's shared-expert gate varies across tokens. Returns the summary
    stored as the golden's family_note."""
    experts, topK, width = moeShape(cfg)
    seqs = [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    goldens = [np.fromfile(os.path.join(goldenDir, c["logits_file"]),
                           dtype="<f4").reshape(-1, fx.kVocab) for c in cases]
    model = loadModel(modelDir)
    assert model.config._experts_implementation == "eager"
    stats = routingStats(model, seqs, cfg)
    for r, g in zip(stats["rows"], goldens):
        assert np.array_equal(r, g), "probed forward differs from the golden rows"
    rule = (f"softmax over the {experts} router logits (fp32), top-{topK}, "
            + ("the top-k weights divided by their sum" if renormalises(cfg) else
               "the top-k softmax probabilities as weights"))
    print(f"  routing: {rule}; transformers' choices equal a float64 re-computation on every "
          f"token (weights within "
          f"{max(s['weight_diff'] for s in stats['layers'].values()):.1e})")
    minGap = min(s["min_gap"] for s in stats["layers"].values())
    for layer, s in stats["layers"].items():
        lo, mean, hi = s["top_weight"]
        print(f"    layer {layer}: {s['tokens']} tokens, router logit std {s['logit_std']:.2f}; "
              f"expert uses {s['uses']}; logit gap #{topK}-#{topK + 1} min {s['min_gap']:.4f} "
              f"median {s['median_gap']:.3f} ({100 * s['frac_gap_below_0.01']:.1f}% < 0.01); "
              f"prob gap min {s['min_prob_gap']:.2e} median {s['median_prob_gap']:.3f}; "
              f"first weight min/mean/max {lo:.3f}/{mean:.3f}/{hi:.3f}")
        unused = [x for x, n in enumerate(s["uses"]) if n == 0]
        if unused:
            raise SystemExit(f"{spec.name}: layer {layer} never routes to experts {unused} on the "
                             "golden sequences; change the seed")
    if minGap <= kMinRouterGap:
        raise SystemExit(f"{spec.name}: router logit gap {minGap:.2e} <= {kMinRouterGap} (top-k "
                         "choice fragile); change the seed")
    gateStats = sharedGateStats(model, seqs) if spec.family == "qwen2_moe" else {}
    for layer, (lo, mean, hi, std) in gateStats.items():
        print(f"    layer {layer}: shared expert gate sigmoid(x . shared_expert_gate) "
              f"min/mean/max {lo:.3f}/{mean:.3f}/{hi:.3f}, std {std:.3f}")
        if hi - lo < 0.3:
            raise SystemExit(f"{spec.name}: layer {layer}'s shared expert gate hardly varies "
                             f"({lo:.3f}..{hi:.3f}); change the seed")

    def maxDiff(mutated) -> float:
        return max(float(np.abs(mlg.forwardLogits(mutated, ids) - g).max())
                   for ids, g in zip(seqs, goldens))

    same, changed, loadNote = moeMutations(spec, modelDir, cfg)
    sameEffects, effects = {}, {}
    for what, m in same.items():
        sameEffects[what] = maxDiff(m)
        print(f"    {what}: max |logits - golden| {sameEffects[what]:.2e}")
        assert sameEffects[what] < mlg.kTolerance / 10, (what, sameEffects[what])
    for what, m in changed.items():
        effects[what] = maxDiff(m)
        print(f"    {what}: max |logits - golden| {effects[what]:.3f}")
        assert effects[what] > 100 * mlg.kTolerance, (what, effects[what])
    layers = stats["layers"]
    note = (f"MoE checks on the golden sequences (prompt + greedy ids, {sum(len(s) for s in seqs)} "
            f"tokens, whole-sequence forward, eager experts): routing = {rule} "
            f"(transformers' choices equal a float64 re-computation on every token); sparse "
            f"layers {sorted(layers)}")
    dense = [i for i in range(cfg["num_hidden_layers"]) if i not in layers]
    if dense:
        note += f", dense layers {dense} " + ("(mlp_only_layers)" if cfg.get("mlp_only_layers") else
                                             f"(decoder_sparse_step {cfg['decoder_sparse_step']})")
    note += ("; expert uses: " + "; ".join(f"layer {i} {s['uses']}"
                                                   for i, s in layers.items())
             + f" (every expert chosen); the #{topK} vs #{topK + 1} router logit gap is at least "
             f"{minGap:.4f} over all tokens and layers (median "
             + ", ".join(f"{s['median_gap']:.3f}" for s in layers.values())
             + f" per layer), the probability gap at least "
             f"{min(s['min_prob_gap'] for s in layers.values()):.2e}")
    if gateStats:
        note += ("; the shared expert's gate sigmoid(x . shared_expert_gate) ranges over "
                 + "; ".join(f"layer {i} {lo:.3f}..{hi:.3f} (mean {mean:.3f})"
                             for i, (lo, mean, hi, _) in gateStats.items()))
    note += (". Same rows (max |diff|): "
             + "; ".join(f"{k} {v:.2g}" for k, v in sameEffects.items())
             + ". Max |logits - golden| when one feature is dropped or swapped: "
             + "; ".join(f"{k} {v:.3g}" for k, v in effects.items()))
    if loadNote:
        note += f". {loadNote[0].upper()}{loadNote[1:]}"
    return note


# ---- driver ------------------------------------------------------------------------------------

def goldenForFixture(spec, repo: str, goldenDir: str, tok) -> None:
    modelDir = os.path.join(repo, "tests/data/models", spec.name)
    cfg = ff.writeFixture(spec, modelDir, tok, transformers.__version__)
    model = loadModel(modelDir)
    assert model.config.get_text_config().vocab_size == fx.kVocab
    assert type(model).__name__ == ff.kArchitectures[spec.family], type(model).__name__
    # The tokenizer files are the Llama fixtures' (tokenizer.json is what kiln reads). Load them
    # as written: in transformers 5 AutoTokenizer maps model_type qwen2/qwen3 to Qwen2Tokenizer,
    # which replaces tokenizer.json's pre-tokenizer and normalizer with Qwen's and adds a pad
    # token <|endoftext|> = 512 (reported below, not worked around in the files).
    hfTok = PreTrainedTokenizerFast.from_pretrained(modelDir)
    sample = hfTok("Mira rang the bell.")["input_ids"]
    assert sample == [1, 315, 409, 263, 313, 16] and len(hfTok) == fx.kVocab, (sample, len(hfTok))
    autoTok = AutoTokenizer.from_pretrained(modelDir)
    probe = "Mira counted 1999 boats."
    if len(autoTok) != fx.kVocab or autoTok(probe)["input_ids"] != hfTok(probe)["input_ids"]:
        print(f"  NOTE AutoTokenizer gives {type(autoTok).__name__} (len {len(autoTok)}): "
              f"{probe!r} -> {autoTok(probe)['input_ids']}, tokenizer.json -> "
              f"{hfTok(probe)['input_ids']}")
    sizes = {f: os.path.getsize(os.path.join(modelDir, f)) for f in sorted(os.listdir(modelDir))}
    print(f"{spec.name} ({type(model).__name__}): {spec.notes}")
    print(f"  files {sizes}; total {sum(sizes.values())} bytes")
    checkLayout(spec, modelDir, model)
    checkSlidingWindow(spec, modelDir, cfg, model)
    checkRope(spec, cfg, model)

    eosIds = mlg.eosIdsOf(modelDir)
    cases, ropes, diffs, genDiffs = [], [], [], []
    for i, ids in enumerate(mlg.kFixturePrompts):
        case, diff, rowRopes, genDiff = makeCase(spec, modelDir, i, ids, eosIds, goldenDir)
        cases.append(case)
        ropes.append(rowRopes)
        diffs.append(diff)
        genDiffs.append(genDiff)
    kind = (cfg.get("rope_scaling") or {}).get("rope_type",
                                               (cfg.get("rope_scaling") or {}).get("type"))
    if kind == "dynamic":
        reportDynamic(spec, cfg, cases, ropes, diffs)
    generateNote = None
    if kind == "longrope":
        generateNote = reportLongrope(spec, cfg, cases, ropes, diffs, genDiffs)
    familyNote = None
    if spec.family == "gemma2":
        familyNote = reportGemma2(spec, modelDir, goldenDir, cfg, cases)
    if spec.family in ff.kGemma3Families:
        familyNote = reportGemma3(spec, modelDir, goldenDir, cases)
    if spec.family in ff.kMoeFamilies:
        familyNote = reportMoe(spec, modelDir, goldenDir, cfg, cases)

    note = (f"weights stored {fx.kDtypeNames[spec.storage_dtype]}; golden computed in fp32 from "
            "those stored weights upcast exactly to fp32, eager attention, CPU")
    if spec.family in ff.kMoeFamilies:
        note += "; experts_implementation eager (a loop over the chosen experts)"
    golden = {"model": spec.name, "model_dir": f"tests/data/models/{spec.name}",
              "vocab_size": fx.kVocab, "dtype_note": note, "versions": mlg.versions(),
              "tolerance": {"logits_max_abs": mlg.kTolerance}}
    if spec.incremental:
        golden["incremental"] = True
        golden["incremental_note"] = kIncrementalNote
    if generateNote:
        golden["generate_note"] = generateNote
    if familyNote:
        golden["family_note"] = familyNote
    golden["cases"] = cases
    mlg.writeGoldenJson(os.path.join(goldenDir, f"{spec.name}.json"), golden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.getcwd(), help="kiln repo root (default: cwd)")
    parser.add_argument("--only", nargs="*", help="fixture names (default: all)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order: same bytes on every rerun
    goldenDir = os.path.join(args.repo, "tests/data/golden")
    os.makedirs(goldenDir, exist_ok=True)
    tok = fx.trainTokenizer()
    if args.only:
        unknown = sorted(set(args.only) - {spec.name for spec in ff.kFixtures})
        if unknown:
            raise SystemExit(f"unknown fixture(s) {unknown}; known: "
                             f"{[spec.name for spec in ff.kFixtures]}")
    for spec in ff.kFixtures:
        if args.only and spec.name not in args.only:
            continue
        goldenForFixture(spec, args.repo, goldenDir, tok)
    print(f"versions: {json.dumps(mlg.versions())}")


if __name__ == "__main__":
    main()
