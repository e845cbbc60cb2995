#!/usr/bin/env python3
"""CPU benchmark of kiln's embeddings (docs/benchmarks.md "Embeddings on the cpu"): a random-weight
BERT-base-shaped BertModel (hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 30522,
512 positions, fp32) with sentence-transformers mean pooling + Normalize, served by `kiln serve`
(POST /v1/embeddings) against transformers' BertModel forward + mean pooling + L2 normalization
on the same token ids, in the same run, on the same machine.

    /opt/vllm-venv/bin/python tools/bench/embeddings_vs_transformers.py \\
        --kiln build/tools/kiln/kiln [--work ~/.cache/kiln/bench/embeddings] [--rounds 3]

Model: transformers' initializer (N(0, 0.02) weights, seed 0), saved as float32 safetensors with
modules.json, 1_Pooling/config.json (mean) and Normalize; no tokenizer (none is needed: the
benchmark sends token ids). kiln compiles it with --max-batch 32 --max-seq-len 512
--max-tokens-per-step 4096 (fp32) and serves it on loopback with --kv-cache-mb 512 (one step's
4,096 tokens of keys and values take 288 MiB).

Inputs: per sequence length L (128 and 512), fixed random ids in [1000, 30000) with [CLS] = 101
first and [SEP] = 102 last; every sequence is exactly L tokens, so transformers pads nothing and
its attention mask is all ones. Per round and length:
  - kiln (HTTP): --clients concurrent clients, each sending --requests requests of --batch id
    lists to /v1/embeddings (encoding_format base64, as the openai client asks by default);
    embeddings/s = sequences / wall time of the whole burst (JSON, HTTP and pooling included);
  - transformers: the same sequences in batches of --batch through BertModel (its default
    attention implementation), mean over the tokens, L2 normalize; torch threads = --threads,
    inference_mode; embeddings/s = sequences / time.
  - kiln engine step (--no-profile to skip): `kiln profile ART --prefill L --batch 4096/L`, one
    full 4,096-token step with no HTTP; embeddings/s = batch / median step time.
Rounds alternate kiln and transformers; medians are printed (each round's value in parentheses),
and the median of the rounds' ratios kiln / transformers.
Before timing, one batch per length is embedded by both and compared: kiln's vectors must equal
transformers' within --tolerance (max absolute difference, default 1e-3), else the script exits
non-zero. The printed difference is the figure to read: with random weights the normalized
vectors of different inputs are only ~1e-2 apart (one token changed at 512 moves a vector by
~4e-4), so 1e-3 alone does not tell inputs apart; kiln measured ~2e-8.

About 5 minutes on a 2-core VM with the defaults (3 rounds, 32 sequences per side, length and
round; the equality check doubles as the warm-up).
"""

import argparse
import base64
import concurrent.futures
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import torch
from transformers import BertConfig, BertModel

kShape = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
              intermediate_size=3072, vocab_size=30522, max_position_embeddings=512,
              type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu", pad_token_id=0,
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
kCls, kSep, kIdLow, kIdHigh = 101, 102, 1000, 30000
kMaxBatch, kMaxSeqLen, kTokensPerStep = 32, 512, 4096


def writeJson(path: str, value) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def writeModel(modelDir: str, layers: int) -> None:
    """A BertModel checkpoint with sentence-transformers' mean pooling + Normalize."""
    cfg = BertConfig(architectures=["BertModel"], **dict(kShape, num_hidden_layers=layers))
    configPath = os.path.join(modelDir, "config.json")
    if os.path.exists(configPath):
        with open(configPath) as f:
            if json.load(f).get("num_hidden_layers") == layers:
                return
    torch.manual_seed(0)
    model = BertModel(cfg).to(torch.float32).eval()
    model.save_pretrained(modelDir)  # model.safetensors, float32
    writeJson(os.path.join(modelDir, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    writeJson(os.path.join(modelDir, "sentence_bert_config.json"),
              {"max_seq_length": kMaxSeqLen, "do_lower_case": False})
    os.makedirs(os.path.join(modelDir, "1_Pooling"), exist_ok=True)
    writeJson(os.path.join(modelDir, "1_Pooling", "config.json"), {
        "word_embedding_dimension": kShape["hidden_size"], "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})


def compileKiln(kiln: str, modelDir: str, artifact: str) -> float:
    start = time.perf_counter()
    subprocess.run([kiln, "compile", modelDir, "-o", artifact, "--max-batch", str(kMaxBatch),
                    "--max-seq-len", str(kMaxSeqLen), "--max-tokens-per-step",
                    str(kTokensPerStep), "--dtype", "fp32", "--quiet"], check=True)
    return time.perf_counter() - start


def randomIds(length: int, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = rng.integers(kIdLow, kIdHigh, size=(count, length), dtype=np.int64)
    ids[:, 0], ids[:, -1] = kCls, kSep
    return ids


def freePort() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KilnServer:
    def __init__(self, kiln: str, artifact: str, kvCacheMb: int, logPath: str):
        self.port = freePort()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [kiln, "serve", artifact, "--host", "127.0.0.1", "--port", str(self.port),
                     "--kv-cache-mb", str(kvCacheMb)]
        self.logPath = logPath
        self.proc = None

    def __enter__(self):
        self.log = open(self.logPath, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kiln serve exited ({self.proc.returncode}); see "
                                   f"{self.logPath}")
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"kiln serve did not answer /ping in 600 s; see {self.logPath}")

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """ids [n, L] -> [n, hidden] float32, one /v1/embeddings request."""
        body = json.dumps({"input": ids.tolist(), "encoding_format": "base64"}).encode()
        req = urllib.request.Request(self.url + "/v1/embeddings", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            answer = json.loads(r.read())
        data = sorted(answer["data"], key=lambda d: d["index"])
        if len(data) != len(ids):
            raise RuntimeError(f"asked for {len(ids)} embeddings, got {len(data)}")
        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                         for d in data])


def kilnHttp(server: KilnServer, ids: np.ndarray, clients: int, requests: int,
             batch: int) -> float:
    """embeddings/s of `clients` concurrent clients each sending `requests` requests."""
    def client(c: int) -> int:
        done = 0
        for r in range(requests):
            first = ((c * requests + r) * batch) % len(ids)
            done += len(server.embed(ids[first:first + batch]))
        return done

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        total = sum(pool.map(client, range(clients)))
        wall = time.perf_counter() - start
    return total / wall


def kilnProfile(kiln: str, artifact: str, length: int, kvCacheMb: int, repeats: int) -> float:
    """embeddings/s of one full step of 4096 / length sequences, from `kiln profile`."""
    batch = min(kMaxBatch, kTokensPerStep // length)
    out = subprocess.run([kiln, "profile", artifact, "--prefill", str(length), "--batch",
                          str(batch), "--repeats", str(repeats), "--kv-cache-mb", str(kvCacheMb),
                          "--no-verify-weights", "--top", "0", "--json"],
                         check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    return batch / (report["step"]["us"] / 1e6)


def hfEmbed(model: BertModel, ids: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(ids)
    mask = torch.ones_like(x)
    hidden = model(input_ids=x, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # sentence-transformers' mean
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


def hfThroughput(model: BertModel, ids: np.ndarray, total: int, batch: int) -> float:
    start = time.perf_counter()
    done = 0
    while done < total:
        first = done % len(ids)
        done += len(hfEmbed(model, ids[first:first + min(batch, total - done)]))
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work", default=os.path.expanduser("~/.cache/kiln/bench/embeddings"))
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16, help="sequences per request / forward")
    parser.add_argument("--clients", type=int, default=2, help="concurrent kiln clients")
    parser.add_argument("--requests", default="1",
                        help="requests per client per round, one value or one per length")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads (default: the CPU count)")
    parser.add_argument("--kv-cache-mb", type=int, default=512)
    parser.add_argument("--profile-repeats", type=int, default=1,
                        help="timed `kiln profile` steps per round (after its own warm-up step)")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--layers", type=int, default=kShape["num_hidden_layers"],
                        help="fewer layers for a quick check of the script (default 12)")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    requests = [int(x) for x in args.requests.split(",")]
    requests = dict(zip(lengths, requests * len(lengths) if len(requests) == 1 else requests))
    if any(l < 2 or l > kMaxSeqLen for l in lengths):
        sys.exit(f"lengths must be in [2, {kMaxSeqLen}]")

    os.makedirs(args.work, exist_ok=True)
    modelDir = os.path.join(args.work, f"bert-base-random-{args.layers}l")
    artifact = modelDir + ".kiln"
    writeModel(modelDir, args.layers)
    compileSeconds = compileKiln(args.kiln, modelDir, artifact)
    print(f"compiled {artifact} in {compileSeconds:.1f} s", flush=True)

    torch.set_num_threads(args.threads)
    model = BertModel.from_pretrained(modelDir, dtype=torch.float32).eval()
    attn = getattr(model.config, "_attn_implementation", "?")
    ids = {l: randomIds(l, args.clients * requests[l] * args.batch, seed=l) for l in lengths}

    runs = {l: {"kiln": [], "hf": [], "step": []} for l in lengths}
    maxDiff = {}
    with KilnServer(args.kiln, artifact, args.kv_cache_mb,
                    os.path.join(args.work, "serve.log")) as server, torch.inference_mode():
        # Warm-up and the equality check: one batch per length through both.
        for l in lengths:
            k = server.embed(ids[l][:args.batch])
            t = hfEmbed(model, ids[l][:args.batch]).numpy()
            maxDiff[l] = float(np.abs(k - t).max())
            # What the tolerance is up against: random-weight BERT's mean-pooled vectors of
            # different inputs are close (about 1e-2 apart at 128 tokens, 7e-3 at 512).
            apart = min(float(np.abs(t[i] - t[j]).max()) for i in range(len(t))
                        for j in range(i))
            print(f"L={l}: max |kiln - transformers| = {maxDiff[l]:.2e} over {args.batch} x "
                  f"{t.shape[1]} values (two different inputs' vectors differ by >= "
                  f"{apart:.1e})", flush=True)
        bad = {l: d for l, d in maxDiff.items() if not d <= args.tolerance}
        if bad:
            sys.exit(f"kiln's embeddings differ from transformers' by more than "
                     f"{args.tolerance}: {bad}")
        for r in range(args.rounds):
            for l in lengths:
                total = args.clients * requests[l] * args.batch
                runs[l]["kiln"].append(kilnHttp(server, ids[l], args.clients, requests[l],
                                                args.batch))
                runs[l]["hf"].append(hfThroughput(model, ids[l], total, args.batch))
                if not args.no_profile:
                    runs[l]["step"].append(kilnProfile(args.kiln, artifact, l, args.kv_cache_mb,
                                                       args.profile_repeats))
                print(f"round {r + 1}, L={l}: " + json.dumps(
                    {k: round(v[-1], 3) for k, v in runs[l].items() if v}), flush=True)

    print(f"\nBERT-base shape, random weights, fp32, {args.layers} layers; kiln: /v1/embeddings, "
          f"{args.clients} clients x {args.batch} sequences per request; transformers "
          f"{__import__('transformers').__version__} / torch {torch.__version__}, "
          f"{args.threads} threads, attn_implementation={attn}, batch {args.batch}; "
          f"median of {args.rounds} rounds\n")
    header = "| seq len | kiln HTTP emb/s (per round) | transformers emb/s (per round) | " \
             "kiln / transformers (per round) |"
    sep = "|---:|---:|---:|---:|"
    if not args.no_profile:
        header += " kiln engine step emb/s (per round) | step / transformers (per round) |"
        sep += "---:|---:|"
    header += " max abs diff |"
    sep += "---:|"
    print(header)
    print(sep)

    def cell(values, unit=""):
        return f"{statistics.median(values):.2f}{unit} ({', '.join(f'{v:.2f}' for v in values)})"

    for l in lengths:
        # Ratios are of the same round (kiln and transformers a minute apart), then the median:
        # a shared machine's speed drifts between rounds more than between the two sides.
        t = runs[l]["hf"]
        ratio = [k / h for k, h in zip(runs[l]["kiln"], t)]
        row = f"| {l} | {cell(runs[l]['kiln'])} | {cell(t)} | {cell(ratio, 'x')} |"
        if not args.no_profile:
            ratio = [s / h for s, h in zip(runs[l]["step"], t)]
            row += f" {cell(runs[l]['step'])} | {cell(ratio, 'x')} |"
        row += f" {maxDiff[l]:.1e} |"
        print(row)


if __name__ == "__main__":
    main()
