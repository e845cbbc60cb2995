#!/usr/bin/env python3
"""CPU benchmark of kiln's mixture-of-experts path (docs/benchmarks.md "Mixture-of-experts on the
cpu"): a random Mixtral-shaped MoE against the dense Mistral-shaped model with the same active
parameters per token (its MLP as wide as the top-k experts together), both compiled by kiln
(fp32), and against transformers running the same MoE checkpoint on the same machine in the
same run (fp32, eager experts loop, torch threads = the CPU count).

    /opt/vllm-venv/bin/python tools/bench/moe_vs_dense.py --kiln build/tools/kiln/kiln \\
        --work /tmp/moe-bench [--rounds 2] [--quantize int8,int4]

Each model: hidden 512, 8 layers, 8 query / 4 KV heads, vocab 8192; MoE: 8 experts of width
1408, top 2 (Mixtral's routing); dense: MLP width 2816 = 2 x 1408. Weights N(0, 0.02) from
transformers' initializer (the values do not change the work). Workloads: batch-1 decode
(`kiln bench --batch 1`, 128 in / 128 out) and a 512-token prefill (`--ttft-len 512`);
transformers: one forward over 512 tokens, and 128 greedy steps from a 128-token prompt with its
KV cache. Rounds alternate the engines; medians are printed, and the ratios.

With --quantize int8,int4 the MoE is also compiled with `kiln compile --quantize` (experts and
every other matrix quantized, routers kept fp32; int8 one scale per row, int4 groups of 32) and
benchmarked in the same rounds; a second table gives each artifact's weights.bin bytes and its
tokens/s next to the fp32 MoE's.
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import torch
from transformers import AutoModelForCausalLM, MistralConfig, MixtralConfig

kShape = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
              vocab_size=8192, max_position_embeddings=2048, rms_norm_eps=1e-5,
              rope_theta=1e6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
kExpertWidth, kExperts, kTopK = 1408, 8, 2


def writeModels(work: str) -> dict:
    torch.manual_seed(0)
    configs = {
        "moe": MixtralConfig(intermediate_size=kExpertWidth, num_local_experts=kExperts,
                             num_experts_per_tok=kTopK, sliding_window=None, **kShape),
        "dense": MistralConfig(intermediate_size=kTopK * kExpertWidth, sliding_window=None,
                               **kShape),
    }
    dirs = {}
    for name, cfg in configs.items():
        path = os.path.join(work, name)
        if not os.path.exists(os.path.join(path, "config.json")):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
            model.save_pretrained(path)
        dirs[name] = path
    return dirs


def compileKiln(kiln: str, modelDir: str, out: str, quantize: str = "") -> None:
    if not os.path.isdir(out):
        extra = ["--quantize", quantize] if quantize else []
        subprocess.run([kiln, "compile", modelDir, "-o", out, "--max-batch", "4",
                        "--max-seq-len", "1024", "--quiet"] + extra, check=True)


def weightBytes(artifact: str) -> int:
    return sum(os.path.getsize(os.path.join(artifact, f)) for f in os.listdir(artifact)
               if f.startswith("weights"))


def kilnBench(kiln: str, artifact: str) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    out = subprocess.run([kiln, "bench", artifact, "--batch", "1", "--input-len", "128",
                          "--output-len", "128", "--num-prompts", "1", "--ttft-len", "512",
                          "--ttft-repeats", "3", "--kv-cache-mb", "256", "--json"],
                         check=True, capture_output=True, text=True, env=env)
    report = json.loads(out.stdout)
    return {"decode": report["batch1_decode_tokens_per_s"],
            "prefill": report["prefill_tokens_per_s"]}


def transformersBench(modelDir: str) -> dict:
    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(modelDir, dtype=torch.float32,
                                                 experts_implementation="eager").eval()
    ids = torch.randint(3, 8192, (1, 512), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(ids[:, :64])  # warm-up
        start = time.perf_counter()
        model(ids)
        prefill = 512 / (time.perf_counter() - start)
        prompt = ids[:, :128]
        out = model(prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(128):
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        decode = 128 / (time.perf_counter() - start)
    return {"decode": decode, "prefill": prefill}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quantize", default="", help="e.g. int8,int4: also these MoE artifacts")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    dirs = writeModels(args.work)
    artifacts = {name: os.path.join(args.work, name + ".kiln") for name in dirs}
    for name in dirs:
        compileKiln(args.kiln, dirs[name], artifacts[name])
    modes = [m for m in args.quantize.split(",") if m]
    for mode in modes:
        artifacts["moe " + mode] = os.path.join(args.work, f"moe-{mode}.kiln")
        compileKiln(args.kiln, dirs["moe"], artifacts["moe " + mode], mode)
    runs = {"kiln moe": [], "kiln dense": [], "transformers moe": []}
    runs.update({f"kiln moe {m}": [] for m in modes})
    for r in range(args.rounds):
        runs["kiln moe"].append(kilnBench(args.kiln, artifacts["moe"]))
        runs["kiln dense"].append(kilnBench(args.kiln, artifacts["dense"]))
        for m in modes:
            runs[f"kiln moe {m}"].append(kilnBench(args.kiln, artifacts["moe " + m]))
        runs["transformers moe"].append(transformersBench(dirs["moe"]))
        print(f"round {r + 1}: " + json.dumps({k: v[-1] for k, v in runs.items()}), flush=True)
    med = {k: {w: statistics.median(run[w] for run in v) for w in ("decode", "prefill")}
           for k, v in runs.items()}
    print("\n| tok/s (fp32, median of %d) | kiln MoE | kiln dense, same active params | "
          "MoE / dense | transformers MoE | kiln / transformers |" % args.rounds)
    print("|---|---:|---:|---:|---:|---:|")
    for w, label in (("decode", "batch-1 decode (128 in / 128 out)"),
                     ("prefill", "512-token prefill")):
        moe, dense, hf = med["kiln moe"][w], med["kiln dense"][w], med["transformers moe"][w]
        print(f"| {label} | {moe:.1f} | {dense:.1f} | {moe / dense:.2f} | {hf:.1f} | "
              f"{moe / hf:.2f} |")
    if not modes:
        return
    fp32 = weightBytes(artifacts["moe"])
    print("\n| MoE artifact | weights bytes | / fp32 | decode tok/s | / fp32 | prefill tok/s | "
          "/ fp32 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m in ["fp32"] + modes:
        key = "kiln moe" if m == "fp32" else f"kiln moe {m}"
        size = weightBytes(artifacts["moe" if m == "fp32" else "moe " + m])
        dec, pre = med[key]["decode"], med[key]["prefill"]
        print(f"| {m} | {size:,} | {size / fp32:.3f} | {dec:.1f} | "
              f"{dec / med['kiln moe']['decode']:.2f} | {pre:.1f} | "
              f"{pre / med['kiln moe']['prefill']:.2f} |")


if __name__ == "__main__":
    main()
