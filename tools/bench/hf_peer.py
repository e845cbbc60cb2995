#!/usr/bin/env python3
"""The peer for `kiln bench`: the same workloads with Hugging Face transformers' generate() on the
same model directory (tools/bench/make_random_llama.py), printing one JSON object with the field
names of `kiln bench --json` (docs/benchmarks.md), so tools/bench/compare.py reads both alike.

    hf_peer.py MODEL_DIR --batch 64 --input-len 128 --output-len 128 [--ttft-len 4096]

Workloads (all greedy; min_new_tokens = max_new_tokens so EOS cannot end a request early, as
kiln's ignore_eos):
  throughput   --num-prompts random prompts (default --batch) of --input-len ids, run as
               generate() calls of --batch prompts each, one after another. All prompts have the
               same length, so no padding (attention_mask of ones). TTFT of a prompt is from the
               start of the run to its batch's first token (as kiln: from submission, queueing
               included); ITL is every gap between consecutive generated tokens.
  batch-1      one prompt alone: tokens after the first over the time between first and last.
  --ttft-len   one prompt of N ids alone, one new token, after one untimed run; R timed runs.
Token times come from a StoppingCriteria that runs once per generated token, after a device
synchronize. Weights in --dtype (default bf16), attn_implementation sdpa, the default dynamic KV
cache, on cuda when available (--device auto) else cpu. Needs torch and transformers.
"""

import argparse
import json
import statistics
import sys
import time


def parseArgs(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", nargs="?", help="the model directory (or --model DIR)")
    p.add_argument("--model", help="same as the positional MODEL_DIR")
    p.add_argument("--batch", type=int, default=1, help="prompts per generate() call")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=0, help="default: --batch")
    p.add_argument("--ttft-len", type=int, default=0, help="long-prompt TTFT length (0: off)")
    p.add_argument("--ttft-repeats", type=int, default=5)
    p.add_argument("--no-batch1", action="store_true", help="skip the batch-1 decode figure")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = p.parse_args(argv)
    if bool(a.model_dir) == bool(a.model):
        p.error("give the model directory once: MODEL_DIR or --model DIR")
    a.model_dir = a.model_dir or a.model
    for flag in ("batch", "input_len", "output_len", "ttft_repeats"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(a, flag)}")
    for flag in ("num_prompts", "ttft_len", "threads"):
        if getattr(a, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must not be negative, got {getattr(a, flag)}")
    a.num_prompts = a.num_prompts or a.batch
    return a


class Peer:
    """A loaded model plus the device and the clock used by every measurement."""

    def __init__(self, args, torch, transformers):
        self.torch = torch
        self.args = args
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = args.device
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            args.model_dir, dtype=dtype, attn_implementation="sdpa",
            device_map=self.device if self.device == "cuda" else None).eval()
        self.model.to(self.device)
        cfg = self.model.config
        eos = cfg.eos_token_id if cfg.eos_token_id is not None else 0
        eos = eos[0] if isinstance(eos, list) else eos
        self.generationConfig = transformers.GenerationConfig(
            do_sample=False, eos_token_id=eos, pad_token_id=eos, use_cache=True)
        self.vocab = cfg.vocab_size
        self.stopping = transformers.StoppingCriteria

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def prompts(self, count, length, seed):
        gen = self.torch.Generator().manual_seed(seed)
        return self.torch.randint(0, self.vocab, (count, length), generator=gen)

    def generate(self, ids, newTokens):
        """Runs generate() on `ids`; returns (token times, generated tokens per prompt)."""
        times = []
        peer = self

        class StepClock(self.stopping):
            def __call__(self, inputIds, scores, **kwargs):
                peer.sync()
                times.append(time.perf_counter())
                return peer.torch.zeros(inputIds.shape[0], dtype=peer.torch.bool,
                                        device=inputIds.device)

        ids = ids.to(self.device)
        with self.torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=self.torch.ones_like(ids), generation_config=self.generationConfig,
                max_new_tokens=newTokens, min_new_tokens=newTokens,
                stopping_criteria=[StepClock()])
        generated = out.shape[1] - ids.shape[1]
        if generated != newTokens or len(times) != newTokens:
            raise RuntimeError(f"generate() made {generated} tokens ({len(times)} steps), "
                               f"expected exactly {newTokens}")
        return times


def latencyMs(values):
    """mean / p50 / p99 in milliseconds; nearest-rank percentiles as kiln bench computes them."""
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}
    ordered = sorted(values)

    def rank(p):
        k = max(1, min(len(ordered), -(-p * len(ordered) // 100)))
        return ordered[int(k) - 1] * 1e3

    return {"mean": statistics.fmean(values) * 1e3, "p50": rank(50), "p99": rank(99)}


def measureThroughput(peer, a):
    prompts = peer.prompts(a.num_prompts, a.input_len, a.seed)
    peer.generate(prompts[:min(a.batch, a.num_prompts)], min(a.output_len, 4))  # warm-up
    ttft, itl = [], []
    peer.sync()
    start = time.perf_counter()
    for i in range(0, a.num_prompts, a.batch):
        chunk = prompts[i:i + a.batch]
        times = peer.generate(chunk, a.output_len)
        ttft += [times[0] - start] * chunk.shape[0]
        gaps = [later - earlier for earlier, later in zip(times, times[1:])]
        itl += gaps * chunk.shape[0]
    seconds = time.perf_counter() - start
    generated = a.num_prompts * a.output_len
    return {
        "elapsed_s": seconds,
        "requests_per_s": a.num_prompts / seconds,
        "output_tokens_per_s": generated / seconds,
        "total_tokens_per_s": a.num_prompts * (a.input_len + a.output_len) / seconds,
        "ttft_ms": latencyMs(ttft),
        "itl_ms": latencyMs(itl),
        "engine": {"generated_tokens": generated},
    }


def measureBatch1Decode(peer, a):
    times = peer.generate(peer.prompts(1, a.input_len, a.seed + 1), a.output_len)
    span = times[-1] - times[0]
    return (len(times) - 1) / span if span > 0 else 0.0


def measureLongPromptTtft(peer, a):
    ttft = []
    for run in range(a.ttft_repeats + 1):  # run 0 warms up (kernel choice for the long shape)
        ids = peer.prompts(1, a.ttft_len, a.seed + 1000003 + run)
        peer.sync()
        start = time.perf_counter()
        times = peer.generate(ids, 1)
        if run > 0:
            ttft.append(times[0] - start)
    ms = latencyMs(ttft)
    return {"input_len": a.ttft_len, "repeats": a.ttft_repeats, "mean": ms["mean"],
            "p50": ms["p50"], "min": min(ttft) * 1e3, "max": max(ttft) * 1e3}


def modelJson(peer, dtypeName):
    cfg = peer.model.config
    heads = cfg.num_attention_heads
    headDim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    unique = {id(p): p for p in peer.model.parameters()}.values()  # a tied table counts once
    return {
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_layers": cfg.num_hidden_layers,
        "num_heads": heads, "num_kv_heads": cfg.num_key_value_heads or heads,
        "head_dim": headDim, "tie_word_embeddings": bool(cfg.tie_word_embeddings), "tp": 1,
        "weights_dtype": dtypeName, "weight_bytes": sum(p.numel() * p.element_size() for p in unique),
        "params": sum(p.numel() for p in unique),
        "activation_dtype": dtypeName, "kv_dtype": dtypeName,
    }


def run(a):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # stderr stays for errors
    peer = Peer(a, torch, transformers)
    dtypeName = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}[a.dtype]
    r = {
        "artifact": a.model_dir,
        "device": peer.device,
        "device_name": torch.cuda.get_device_name() if peer.device == "cuda" else "cpu",
        "impl": f"transformers {transformers.__version__} / torch {torch.__version__}, sdpa, "
                f"generate(), {torch.get_num_threads()} CPU threads",
        "batch": a.batch, "input_len": a.input_len, "output_len": a.output_len,
        "num_prompts": a.num_prompts, "ignore_eos": True, "weights_dtype": dtypeName,
        "model": modelJson(peer, dtypeName),
    }
    steps = [("throughput", lambda: r.update(measureThroughput(peer, a)))]
    if not a.no_batch1 and a.output_len > 1:
        steps.append(("batch-1 decode", lambda: r.update(
            batch1_decode_tokens_per_s=measureBatch1Decode(peer, a))))
    if a.ttft_len:
        def longPrompt():
            ttft = measureLongPromptTtft(peer, a)
            r["prefill_tokens_per_s"] = a.ttft_len / (ttft["mean"] * 1e-3)
            r["long_prompt_ttft_ms"] = ttft
        steps.append(("long-prompt TTFT", longPrompt))
    for name, step in steps:
        try:
            step()
        except torch.OutOfMemoryError as e:
            # One workload too big for the GPU (HF keeps a dense KV cache per batch) must not lose
            # the others' numbers: record it and go on.
            r.setdefault("errors", {})[name] = f"out of memory: {str(e).splitlines()[0]}"
            torch.cuda.empty_cache()
    return r


def main(argv):
    a = parseArgs(argv)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"hf_peer: needs torch and transformers ({e})", file=sys.stderr)
        return 2
    r = run(a)
    print(json.dumps(r))
    return 3 if "errors" in r else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
