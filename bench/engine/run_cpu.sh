#!/usr/bin/env bash
# Engine benchmark on CPU (not a test): compile TinyStories-656K and the tiny-llama fixture, then
# `kiln bench` offline throughput at concurrency 1, 2, 4, ... up to the compiled max batch, and
# (context only) HF transformers generate() on TinyStories-656K at batch 1 and 8.
# Usage: bench/engine/run_cpu.sh [BUILD_DIR]
#   BUILD_DIR: a configured build with the `kiln` target (default build-enginereal).
#   Env: ASSETS (default ../shared/assets), PYTHON (default /opt/kiln-venv/bin/python; HF=0 skips
#   the peer), MAX_BATCH (16), INPUT_LEN (32), OUTPUT_LEN (64), NUM_PROMPTS (64); OMP_NUM_THREADS
#   is passed through (on a shared 2-core VM, 1 gives stable numbers; see docs/benchmarks.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-enginereal}"
assets="${ASSETS:-$root/../shared/assets}"
python="${PYTHON:-/opt/kiln-venv/bin/python}"
max_batch="${MAX_BATCH:-16}"
in_len="${INPUT_LEN:-32}"
out_len="${OUTPUT_LEN:-64}"
num_prompts="${NUM_PROMPTS:-64}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ninja -C "$build" kiln >/dev/null || echo "warning: ninja failed; using the kiln already in $build" >&2
kiln="$build/tools/kiln/kiln"

declare -A models=([tiny-llama]="$root/tests/data/models/tiny-llama")
order=(tiny-llama)
if [ -f "$assets/models/tinystories-656K-hf/config.json" ]; then
  models[tinystories-656K]="$assets/models/tinystories-656K-hf"
  order=(tinystories-656K tiny-llama)
else
  echo "note: $assets/models/tinystories-656K-hf is absent; benchmarking the fixture only" >&2
fi

echo "input $in_len, output $out_len tokens, $num_prompts prompts, greedy, ignore_eos; $(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
printf "| model | batch | req/s | output tok/s | total tok/s | TTFT mean / p50 / p99 ms | ITL mean / p50 / p99 ms | batch-1 decode tok/s | steps | tok/step |\n"
printf "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
for name in "${order[@]}"; do
  art="$work/$name.kiln"
  "$kiln" compile "${models[$name]}" -o "$art" --max-batch "$max_batch" --max-seq-len 256 --quiet
  for ((b = 1; b <= max_batch; b *= 2)); do
    flags=(--batch "$b" --input-len "$in_len" --output-len "$out_len" --num-prompts "$num_prompts" --json)
    [ "$b" -gt 1 ] && flags+=(--no-batch1)
    "$kiln" bench "$art" "${flags[@]}" 2>/dev/null | "$python" "$root/bench/engine/table_row.py" "$name"
  done
done

if [ "${HF:-1}" != 0 ] && [ -n "${models[tinystories-656K]:-}" ]; then
  echo
  echo "peer: HF transformers generate() on tinystories-656K (same lengths, prompts in batches)"
  for b in 1 8; do
    "$python" "$root/bench/engine/bench_hf.py" "${models[tinystories-656K]}" --batch "$b" \
      --input-len "$in_len" --output-len "$out_len" --num-prompts "$num_prompts" 2>/dev/null
  done
fi
