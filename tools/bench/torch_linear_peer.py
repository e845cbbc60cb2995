#!/usr/bin/env python3
"""The peer of tools/bench/cpu_linear_bench's prefill column: torch.nn.functional.linear (oneDNN /
MKL sgemm on the cpu) on the same SmolLM2-135M shapes, 512 rows, fp32 or bf16 (x and weights both, as a model loaded
with that torch_dtype runs), on the threads given, printing GF/s per shape (median of REPEATS calls
after 3 warm-ups) in the bench's row format.

    /root/.cache/kiln/torch-venv/bin/python tools/bench/torch_linear_peer.py [REPEATS] [THREADS] [fp32|bf16]
"""

import statistics
import sys
import time

import torch

kShapes = [("qkv 576->960", 576, 960), ("o 576->576", 576, 576),
           ("gate_up 576->3072", 576, 3072), ("down 1536->576", 1536, 576)]
kRows = 512


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    dtype_name = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    torch.set_num_threads(threads)
    print(f"torch {torch.__version__} linear, {threads} threads, {kRows} rows, median of {repeats}")
    for name, k, n in kShapes:
        x = torch.randn(kRows, k).to(dtype)
        w = (torch.randn(n, k) * 0.05).to(dtype)
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            times.append(time.perf_counter() - start)
        print(f"torch      {dtype_name}   {name:20s} {2.0 * kRows * k * n / statistics.median(times) / 1e9:10.1f}")


if __name__ == "__main__":
    main()
