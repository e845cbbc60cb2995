#!/usr/bin/env python3
"""Writes a Hugging Face Llama model directory with random weights and the exact shapes and
config.json of a published model, for benchmarks: speed depends on shapes and dtypes, not on what
the weights say, and the real checkpoints are gated downloads the GPU machines cannot reach.

    make_random_llama.py --preset llama-3.1-8b --out /tmp/llama-3.1-8b [--dtype bf16] [--seed 0]
    make_random_llama.py --preset llama-3.1-8b --dry-run      # tensor list and totals as JSON

Presets: llama-3.1-8b, llama-3.2-1b, llama-3.2-3b (config.json values as published by Meta on
the Hugging Face hub: base models, so eos_token_id is 128001), random-98.6m (the CPU benchmarks'
second model: hidden 1024, 8 layers, 16/4 heads, intermediate 2816, vocab 8192, tied) and `tiny`
for tests. --layers N overrides num_hidden_layers for quick runs.

Output: config.json, generation_config.json, model-0000i-of-0000N.safetensors shards of at most
--max-shard-bytes (default 5,000,000,000, transformers' "5GB") and model.safetensors.index.json.
No tokenizer: benchmarks feed token ids.

Values: norm weights are exactly 1; every other tensor holds N(0, 0.02) values stored in --dtype
(bf16 = the upper 16 bits of the float32, rounded to nearest even). Drawing 8e9 normals for the 8B
model would take minutes, so the script draws one pool of at most 2^26 normals (seeded by --seed)
and fills each tensor with windows of 2^20 consecutive pool values taken at random offsets (seeded
by --seed and the tensor's index). Values therefore repeat across and within tensors at a period of
whole windows; benchmark kernels do not care. Shards are written by parallel threads straight from
the pool (no per-tensor copy), so the 8B model is bound by disk speed. Only numpy is needed.
"""

import argparse
import concurrent.futures
import json
import os
import sys
import time

kStd = 0.02
kPoolElems = 1 << 26
kWindowElems = 1 << 20
kDefaultMaxShardBytes = 5_000_000_000

kDtypes = {  # --dtype: (safetensors dtype, config torch_dtype, bytes per element)
    "bf16": ("BF16", "bfloat16", 2),
    "fp16": ("F16", "float16", 2),
    "fp32": ("F32", "float32", 4),
}


def llama3Config(hidden, intermediate, layers, heads, kvHeads, headDim, ropeFactor, tied):
    """config.json of a Llama 3.x base model as published (transformers 4.4x keys)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "head_dim": headDim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kvHeads,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": ropeFactor,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 128256,
    }


def tinyConfig():
    """Small enough for CI; keeps what the big presets exercise: GQA, head_dim given explicitly,
    llama3 rope scaling, an untied lm_head."""
    cfg = llama3Config(hidden=64, intermediate=192, layers=2, heads=4, kvHeads=2, headDim=16,
                       ropeFactor=8.0, tied=False)
    cfg.update({"vocab_size": 1024, "bos_token_id": 1, "eos_token_id": 2,
                "max_position_embeddings": 4096})
    cfg["rope_scaling"]["original_max_position_embeddings"] = 512
    return cfg


def random98mConfig():
    """The random 98.6M-parameter Llama of docs/benchmarks.md's CPU tables: weights that stream
    from memory (394 MB in fp32) on a model a 2-core machine runs in minutes. transformers'
    LlamaConfig defaults for what it does not set: plain rope, theta 10000, eps 1e-6."""
    cfg = llama3Config(hidden=1024, intermediate=2816, layers=8, heads=16, kvHeads=4, headDim=64,
                       ropeFactor=1.0, tied=True)
    del cfg["rope_scaling"]
    cfg.update({"vocab_size": 8192, "bos_token_id": 1, "eos_token_id": 2,
                "max_position_embeddings": 2048, "rope_theta": 10000.0, "rms_norm_eps": 1e-06})
    return cfg


kPresets = {
    "llama-3.1-8b": llama3Config(4096, 14336, 32, 32, 8, 128, 8.0, tied=False),
    "llama-3.2-1b": llama3Config(2048, 8192, 16, 32, 8, 64, 32.0, tied=True),
    "llama-3.2-3b": llama3Config(3072, 8192, 28, 24, 8, 128, 32.0, tied=True),
    "random-98.6m": random98mConfig(),
    "tiny": tinyConfig(),
}


def generationConfig(cfg):
    # The published base models sample by default; benchmarks override it (greedy, ignore_eos).
    return {"bos_token_id": cfg["bos_token_id"], "do_sample": True,
            "eos_token_id": cfg["eos_token_id"], "temperature": 0.6, "top_p": 0.9}


def buildConfig(preset, dtype, layers):
    cfg = json.loads(json.dumps(kPresets[preset]))  # a deep copy
    cfg["torch_dtype"] = kDtypes[dtype][1]
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    return cfg


def tensorList(cfg):
    """(name, shape, isNorm) in transformers' LlamaForCausalLM naming."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    tensors = [("model.embed_tokens.weight", [cfg["vocab_size"], h], False)]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        tensors += [
            (p + "input_layernorm.weight", [h], True),
            (p + "self_attn.q_proj.weight", [q, h], False),
            (p + "self_attn.k_proj.weight", [kv, h], False),
            (p + "self_attn.v_proj.weight", [kv, h], False),
            (p + "self_attn.o_proj.weight", [h, q], False),
            (p + "post_attention_layernorm.weight", [h], True),
            (p + "mlp.gate_proj.weight", [i, h], False),
            (p + "mlp.up_proj.weight", [i, h], False),
            (p + "mlp.down_proj.weight", [h, i], False),
        ]
    tensors.append(("model.norm.weight", [h], True))
    if not cfg["tie_word_embeddings"]:
        tensors.append(("lm_head.weight", [cfg["vocab_size"], h], False))
    return tensors


def numElements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def planShards(tensors, elemBytes, maxShardBytes):
    """Greedy in tensor order: a new shard starts when the next tensor would pass the limit."""
    shards, current, currentBytes = [], [], 0
    for index, (name, shape, isNorm) in enumerate(tensors):
        nbytes = numElements(shape) * elemBytes
        if current and currentBytes + nbytes > maxShardBytes:
            shards.append(current)
            current, currentBytes = [], 0
        current.append(index)
        currentBytes += nbytes
    if current:
        shards.append(current)
    return shards


def shardName(i, count):
    return f"model-{i + 1:05d}-of-{count:05d}.safetensors"


def buildPlan(args):
    cfg = buildConfig(args.preset, args.dtype, args.layers)
    stDtype, _, elemBytes = kDtypes[args.dtype]
    tensors = tensorList(cfg)
    shards = planShards(tensors, elemBytes, args.max_shard_bytes)
    tensorRows, shardRows = [], []
    for s, indices in enumerate(shards):
        file = shardName(s, len(shards))
        shardBytes = 0
        for index in indices:
            name, shape, _ = tensors[index]
            nbytes = numElements(shape) * elemBytes
            shardBytes += nbytes
            tensorRows.append({"name": name, "shape": shape, "dtype": stDtype, "bytes": nbytes,
                               "file": file})
        shardRows.append({"file": file, "bytes": shardBytes, "tensors": len(indices)})
    return {
        "preset": args.preset,
        "dtype": args.dtype,
        "config": cfg,
        "generation_config": generationConfig(cfg),
        "total_params": sum(numElements(shape) for _, shape, _ in tensors),
        "total_bytes": sum(t["bytes"] for t in tensorRows),
        "shards": shardRows,
        "tensors": tensorRows,
    }


class RandomSource:
    """One seeded pool of N(0, kStd) values in the storage dtype; tensors read random windows."""

    def __init__(self, np, seed, dtype, totalElems):
        self.np = np
        self.seed = seed
        self.poolElems = max(1, min(kPoolElems, totalElems))
        self.window = min(kWindowElems, self.poolElems)
        rng = np.random.default_rng(seed)
        normals = rng.standard_normal(self.poolElems + self.window, dtype=np.float32)
        normals *= np.float32(kStd)
        self.pool = toStorage(np, normals, dtype)
        self.one = toStorage(np, np.ones(1, dtype=np.float32), dtype)[0]

    def chunks(self, tensorIndex, count, isNorm):
        if isNorm:
            yield self.np.full(count, self.one, dtype=self.pool.dtype)
            return
        rng = self.np.random.default_rng([self.seed, tensorIndex])
        while count:
            m = min(self.window, count)
            offset = int(rng.integers(0, self.poolElems))
            yield self.pool[offset:offset + m]
            count -= m


def toStorage(np, f32, dtype):
    if dtype == "fp32":
        return f32
    if dtype == "fp16":
        return f32.astype(np.float16)
    bits = f32.view(np.uint32)
    # Round to nearest even on the 16 bits dropped; the inputs are finite, so no NaN care.
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def safetensorsHeader(rows):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for t in rows:
        header[t["name"]] = {"dtype": t["dtype"], "shape": t["shape"],
                             "data_offsets": [offset, offset + t["bytes"]]}
        offset += t["bytes"]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text


def writeShard(path, rows, source, tensorIndex):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(safetensorsHeader(rows))
        for t in rows:
            count = numElements(t["shape"])
            isNorm = t["name"].endswith("norm.weight")
            for chunk in source.chunks(tensorIndex[t["name"]], count, isNorm):
                f.write(memoryview(chunk).cast("B"))
    os.replace(tmp, path)


def writeJson(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def writeModel(plan, out, seed, threads):
    import numpy as np  # only needed for weights: --dry-run runs on a bare python3

    os.makedirs(out, exist_ok=True)
    writeJson(os.path.join(out, "config.json"), plan["config"])
    writeJson(os.path.join(out, "generation_config.json"), plan["generation_config"])
    tensorIndex = {t["name"]: i for i, t in enumerate(plan["tensors"])}
    totalElems = sum(numElements(t["shape"]) for t in plan["tensors"])
    source = RandomSource(np, seed, plan["dtype"], totalElems)
    byFile = {}
    for t in plan["tensors"]:
        byFile.setdefault(t["file"], []).append(t)
    workers = max(1, min(threads, len(byFile)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = [pool.submit(writeShard, os.path.join(out, file), rows, source, tensorIndex)
                for file, rows in byFile.items()]
        for job in jobs:
            job.result()
    writeJson(os.path.join(out, "model.safetensors.index.json"), {
        "metadata": {"total_size": plan["total_bytes"], "total_parameters": plan["total_params"]},
        "weight_map": {t["name"]: t["file"] for t in plan["tensors"]},
    })


def parseArgs(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True, choices=sorted(kPresets))
    p.add_argument("--out", help="model directory to write (created; files in it are replaced)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=sorted(kDtypes), default="bf16")
    p.add_argument("--layers", type=int, help="override num_hidden_layers (quick runs)")
    p.add_argument("--max-shard-bytes", type=int, default=kDefaultMaxShardBytes)
    p.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1),
                   help="shards written at once (default min(8, cores))")
    p.add_argument("--dry-run", action="store_true",
                   help="print config, tensor list, shards and totals as JSON; write nothing")
    args = p.parse_args(argv)
    if args.layers is not None and args.layers < 1:
        p.error(f"--layers must be at least 1, got {args.layers}")
    if args.max_shard_bytes < 1:
        p.error(f"--max-shard-bytes must be positive, got {args.max_shard_bytes}")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if not args.dry_run and not args.out:
        p.error("--out DIR is required unless --dry-run")
    return args


def main(argv):
    args = parseArgs(argv)
    plan = buildPlan(args)
    if args.dry_run:
        print(json.dumps(plan, indent=1))
        return 0
    start = time.monotonic()
    try:
        writeModel(plan, args.out, args.seed, args.threads)
    except ImportError as e:
        print(f"make_random_llama: writing weights needs numpy ({e})", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"make_random_llama: writing {args.out}: {e}", file=sys.stderr)
        return 1
    print(f"make_random_llama: {args.preset} ({plan['config']['num_hidden_layers']} layers, "
          f"{args.dtype}): {plan['total_params']:,} parameters, {plan['total_bytes']:,} bytes in "
          f"{len(plan['shards'])} shard(s) -> {args.out} in {time.monotonic() - start:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
