#!/usr/bin/env python3
"""Writes a Hugging Face model directory with random weights for any config.json of the families
kiln compiles (llama, mistral, qwen2, qwen3, phi3, gemma2), with each family's real tensor names:
Qwen2's q/k/v biases, Qwen3's q_norm / k_norm, Phi-3's fused qkv_proj and gate_up_proj, Gemma 2's
four norms a layer (input / post_attention / pre_feedforward / post_feedforward_layernorm), no
lm_head when tie_word_embeddings (Gemma 2: also when the key is absent, Gemma2Config's default).
The sibling of make_random_llama.py (whose presets are Llama shapes); it writes through that
script's functions, so the values, seeding and shards are the same: N(0, 0.02) from one seeded
pool, norm weights exactly 1 (Gemma 2 stores the offset from 1, so its norms scale by 2), biases
drawn like weights.

    make_random_model.py --config config.json [--generation-config g.json] --out DIR
    make_random_model.py --chat-golden tests/data/golden/chat_prompt_ids.json --tokenizer qwen2.5 \\
        --tokenizer-dir ../shared/assets/tokenizers/qwen2.5 --out /tmp/tiny-qwen2.5
    ... --dry-run                           # config, tensor list and totals as JSON; writes nothing

--chat-golden NAME takes config.json and generation_config.json from the `tiny_model` entry that
tools/goldens/make_chat_prompt_goldens.py stored for tokenizer NAME, and fails unless the tensors
derived here are exactly the ones listed there (names and shapes of transformers' checkpoint).
--tokenizer-dir copies the tokenizer files kiln compile reads (tokenizer.json,
tokenizer_config.json with its chat_template, special_tokens_map.json, chat_template.jinja) into the
model directory; nothing else of that directory. --chat-template FILE writes FILE as the model's
chat_template.jinja (which kiln compile prefers to tokenizer_config.json's), for a tokenizer that
ships without one: with --chat-golden, the golden entry's `chat_template` (a path under the shared
assets, e.g. Gemma 2's google-gemma-2-2b-it.jinja) is the default, looked for in --assets.
Only numpy is needed (--dry-run: only python3).
"""

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time

kHere = os.path.dirname(os.path.abspath(__file__))
kTokenizerFiles = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja")
kFamilies = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2")


def loadRandomLlama():
    spec = importlib.util.spec_from_file_location("make_random_llama",
                                                  os.path.join(kHere, "make_random_llama.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mrl = loadRandomLlama()


def headDim(cfg):
    # Mistral and Phi-3 checkpoints have no head_dim key (some write null): hidden / heads.
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def attentionTensors(cfg, p):
    """(name, shape) of one layer's attention in the family's naming."""
    family, h, hd = cfg["model_type"], cfg["hidden_size"], headDim(cfg)
    q = cfg["num_attention_heads"] * hd
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd
    a = p + "self_attn."
    if family == "phi3":  # rows [q | k | v], as tests/data/README.md describes for tiny-phi3
        return [(a + "qkv_proj.weight", [q + 2 * kv, h]), (a + "o_proj.weight", [h, q])]
    tensors = [(a + "q_proj.weight", [q, h]), (a + "k_proj.weight", [kv, h]),
               (a + "v_proj.weight", [kv, h]), (a + "o_proj.weight", [h, q])]
    if family == "qwen2":  # q/k/v biases always, o_proj none (Qwen2Attention)
        tensors += [(a + "q_proj.bias", [q]), (a + "k_proj.bias", [kv]), (a + "v_proj.bias", [kv])]
    elif cfg.get("attention_bias"):  # Llama / Qwen3: one flag for all four projections
        tensors += [(a + "q_proj.bias", [q]), (a + "k_proj.bias", [kv]),
                    (a + "v_proj.bias", [kv]), (a + "o_proj.bias", [h])]
    if family == "qwen3":
        tensors += [(a + "q_norm.weight", [hd]), (a + "k_norm.weight", [hd])]
    return tensors


def mlpTensors(cfg, p):
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    if cfg["model_type"] == "phi3":  # rows [gate | up]
        return [(p + "mlp.gate_up_proj.weight", [2 * i, h]), (p + "mlp.down_proj.weight", [h, i])]
    return [(p + "mlp.gate_proj.weight", [i, h]), (p + "mlp.up_proj.weight", [i, h]),
            (p + "mlp.down_proj.weight", [h, i])]


def tiedByDefault(cfg):
    """tie_word_embeddings when config.json leaves it out: Gemma2Config ties, the others do not."""
    return cfg["model_type"] == "gemma2"


def tensorList(cfg):
    """(name, shape) in transformers' naming for cfg's model_type, in checkpoint order."""
    if cfg.get("model_type") not in kFamilies:
        raise ValueError(f"model_type {cfg.get('model_type')!r} is not one of {kFamilies}")
    h, gemma = cfg["hidden_size"], cfg["model_type"] == "gemma2"
    tensors = [("model.embed_tokens.weight", [cfg["vocab_size"], h])]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        tensors += [(p + "input_layernorm.weight", [h])]
        tensors += attentionTensors(cfg, p)
        tensors += [(p + "post_attention_layernorm.weight", [h])]
        if gemma:  # the MLP's own pre/post norms (Gemma2DecoderLayer)
            tensors += [(p + "pre_feedforward_layernorm.weight", [h])]
        tensors += mlpTensors(cfg, p)
        if gemma:
            tensors += [(p + "post_feedforward_layernorm.weight", [h])]
    tensors.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings", tiedByDefault(cfg)):
        tensors.append(("lm_head.weight", [cfg["vocab_size"], h]))
    return tensors


def buildPlan(cfg, generationConfig, dtype, maxShardBytes):
    """The plan make_random_llama.writeModel writes (config, tensor rows, shards, totals)."""
    stDtype, torchDtype, elemBytes = mrl.kDtypes[dtype]
    cfg = dict(cfg, torch_dtype=torchDtype)
    tensors = [(name, shape, name.endswith("norm.weight")) for name, shape in tensorList(cfg)]
    rows, shardRows = [], []
    shards = mrl.planShards(tensors, elemBytes, maxShardBytes)
    for s, indices in enumerate(shards):
        file = mrl.shardName(s, len(shards))
        shardBytes = 0
        for index in indices:
            name, shape, _ = tensors[index]
            nbytes = mrl.numElements(shape) * elemBytes
            shardBytes += nbytes
            rows.append({"name": name, "shape": shape, "dtype": stDtype, "bytes": nbytes,
                         "file": file})
        shardRows.append({"file": file, "bytes": shardBytes, "tensors": len(indices)})
    return {"dtype": dtype, "config": cfg, "generation_config": generationConfig,
            "total_params": sum(mrl.numElements(shape) for _, shape, _ in tensors),
            "total_bytes": sum(r["bytes"] for r in rows), "shards": shardRows, "tensors": rows}


def chatGoldenEntry(goldenPath, tokenizer):
    with open(goldenPath) as f:
        golden = json.load(f)
    entries = golden["tokenizers"]
    if tokenizer not in entries:
        raise ValueError(f"{goldenPath} has no tokenizer {tokenizer!r} (it has {sorted(entries)})")
    return entries[tokenizer]


def chatGoldenModel(goldenPath, tokenizer):
    """(config, generation_config, {name: shape}) of the golden's tiny_model for `tokenizer`."""
    tiny = chatGoldenEntry(goldenPath, tokenizer)["tiny_model"]
    return tiny["config"], tiny["generation_config"], tiny["tensors"]


def chatGoldenTemplate(goldenPath, tokenizer, assets):
    """The chat template file the golden's entry for `tokenizer` names (`chat_template`, a
    "shared:" path under the assets directory), or None when the tokenizer has its own."""
    path = chatGoldenEntry(goldenPath, tokenizer).get("chat_template")
    if path is None:
        return None
    return os.path.join(assets, path.removeprefix("shared:"))


def checkAgainstGolden(plan, expected):
    got = {t["name"]: t["shape"] for t in plan["tensors"]}
    if got != expected:
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        shapes = sorted(n for n in set(got) & set(expected) if got[n] != expected[n])
        raise ValueError(f"tensors differ from the golden's tiny_model: missing {missing}, "
                         f"extra {extra}, other shapes {shapes}")


def copyTokenizer(tokenizerDir, out):
    """Copies the tokenizer files present in tokenizerDir; returns their names."""
    copied = []
    for name in kTokenizerFiles:
        src = os.path.join(tokenizerDir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out, name))  # not copy(): the assets are read-only
            copied.append(name)
    if "tokenizer.json" not in copied:
        raise FileNotFoundError(f"{tokenizerDir} holds no tokenizer.json")
    return copied


def writeModel(plan, out, seed=0, threads=1, tokenizerDir=None, chatTemplate=None):
    """Writes config, generation config, weights, (from tokenizerDir) the tokenizer files and
    (from the file chatTemplate) chat_template.jinja; returns the names of the files copied."""
    if chatTemplate and not os.path.isfile(chatTemplate):
        raise FileNotFoundError(f"chat template {chatTemplate} is absent")
    mrl.writeModel(plan, out, seed, threads)
    copied = copyTokenizer(tokenizerDir, out) if tokenizerDir else []
    if chatTemplate:
        shutil.copyfile(chatTemplate, os.path.join(out, "chat_template.jinja"))
        copied.append("chat_template.jinja")
    return copied


def readJson(path):
    with open(path) as f:
        return json.load(f)


def parseArgs(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="config.json to build the model of")
    source.add_argument("--chat-golden", help="chat_prompt_ids.json: use a tokenizer's tiny_model")
    p.add_argument("--generation-config", help="generation_config.json (with --config; default: "
                   "bos/eos ids of the config)")
    p.add_argument("--tokenizer", help="with --chat-golden: which tokenizer's tiny_model")
    p.add_argument("--tokenizer-dir", help="copy tokenizer.json, tokenizer_config.json and "
                   "special_tokens_map.json from this directory into --out")
    p.add_argument("--chat-template", help="write this file as the model's chat_template.jinja "
                   "(with --chat-golden default: the entry's chat_template, under --assets)")
    p.add_argument("--assets", default=os.environ.get("KILN_ASSETS_DIR", "/work/shared/assets"),
                   help="shared assets directory, for the golden's chat_template (default: "
                   "$KILN_ASSETS_DIR or /work/shared/assets)")
    p.add_argument("--out", help="model directory to write (created; files in it are replaced)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=sorted(mrl.kDtypes), default="fp32")
    p.add_argument("--max-shard-bytes", type=int, default=mrl.kDefaultMaxShardBytes)
    p.add_argument("--dry-run", action="store_true",
                   help="print config, tensor list, shards and totals as JSON; write nothing")
    args = p.parse_args(argv)
    if args.chat_golden and not args.tokenizer:
        p.error("--chat-golden needs --tokenizer NAME")
    if not args.dry_run and not args.out:
        p.error("--out DIR is required unless --dry-run")
    return args


def main(argv):
    args = parseArgs(argv)
    try:
        chatTemplate = args.chat_template
        if args.chat_golden:
            cfg, gen, expected = chatGoldenModel(args.chat_golden, args.tokenizer)
            if chatTemplate is None:
                chatTemplate = chatGoldenTemplate(args.chat_golden, args.tokenizer, args.assets)
        else:
            cfg, expected = readJson(args.config), None
            gen = (readJson(args.generation_config) if args.generation_config else
                   {k: cfg[k] for k in ("bos_token_id", "eos_token_id") if k in cfg})
        plan = buildPlan(cfg, gen, args.dtype, args.max_shard_bytes)
        if expected is not None:
            checkAgainstGolden(plan, expected)
    except (OSError, ValueError, KeyError) as e:
        print(f"make_random_model: {e}", file=sys.stderr)
        return 1
    if args.dry_run:
        print(json.dumps(plan, indent=1))
        return 0
    start = time.monotonic()
    try:
        copied = writeModel(plan, args.out, args.seed, 1, args.tokenizer_dir, chatTemplate)
    except ImportError as e:
        print(f"make_random_model: writing weights needs numpy ({e})", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"make_random_model: writing {args.out}: {e}", file=sys.stderr)
        return 1
    print(f"make_random_model: {cfg['model_type']}: {plan['total_params']:,} parameters, "
          f"{plan['total_bytes']:,} bytes{', tokenizer ' + ', '.join(copied) if copied else ''} "
          f"-> {args.out} in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
