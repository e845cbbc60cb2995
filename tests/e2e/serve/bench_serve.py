"""Serving benchmark (not a test): throughput, TTFT and inter-token latency of `kiln serve` at
several client concurrencies, over loopback with streaming completions.

Method: start `kiln serve ARTIFACT`; for each concurrency C, C client threads each send streaming
/v1/completions requests back to back (fixed prompt per client, ignore_eos, max_tokens N) until
C * R requests are done. TTFT = time from sending the request to the first SSE chunk with text
or tokens; ITL = gaps between later chunks; throughput = generated tokens / wall time. One
warm-up request precedes each run. Prints one JSON line per concurrency, with the server's peak
RSS so far (server_peak_rss_kib, Linux VmHWM).

Usage: python bench_serve.py --kiln KILN --artifact DIR [--concurrency 1,16,64] [--requests 4]
                             [--max-tokens 64] [--extra-args "--max-batch 64"]"""
import argparse
import http.client
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_request(port, prompt, max_tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    stamps = []
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
            stamps.append(time.perf_counter())
    conn.close()
    return start, stamps


def run(port, concurrency, requests_each, max_tokens):
    ttft, itl, tokens = [], [], [0]
    lock = threading.Lock()

    def client(i):
        for r in range(requests_each):
            start, stamps = one_request(port, f"Once upon a time, client {i} said", max_tokens)
            with lock:
                ttft.append(stamps[0] - start)
                itl.extend(b - a for a, b in zip(stamps, stamps[1:]))
                tokens[0] += len(stamps)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    def pct(values, p):
        values = sorted(values)
        return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else 0

    return {"concurrency": concurrency, "requests": concurrency * requests_each,
            "output_tokens": tokens[0], "wall_s": round(wall, 3),
            "throughput_tok_s": round(tokens[0] / wall, 1),
            "ttft_ms_p50": round(pct(ttft, 50) * 1e3, 2), "ttft_ms_p99": round(pct(ttft, 99) * 1e3, 2),
            "itl_ms_p50": round(pct(itl, 50) * 1e3, 3), "itl_ms_p99": round(pct(itl, 99) * 1e3, 3),
            "itl_ms_mean": round(statistics.fmean(itl) * 1e3, 3) if itl else 0}


def peak_rss_kib(pid):
    """The server's peak resident set size so far (Linux VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", required=True)
    p.add_argument("--artifact", required=True)
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--extra-args", default="")
    a = p.parse_args()
    port = free_port()
    proc = subprocess.Popen([a.kiln, "serve", a.artifact, "--host", "127.0.0.1", "--port",
                             str(port)] + shlex.split(a.extra_args), stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        one_request(port, "warm up", 4)
        for c in [int(x) for x in a.concurrency.split(",")]:
            result = run(port, c, a.requests, a.max_tokens)
            result["server_peak_rss_kib"] = peak_rss_kib(proc.pid)  # so far, all runs included
            print(json.dumps(result), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


if __name__ == "__main__":
    sys.exit(main())
