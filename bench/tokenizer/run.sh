#!/usr/bin/env bash
# Tokenizer benchmark (not a test): kiln vs HF tokenizers, single thread, same ~10 MB of documents.
# Usage: bench/tokenizer/run.sh [BUILD_DIR] [FAMILY...]
#   BUILD_DIR: a configured build with kiln_text built (default build-tokenizer); FAMILY: gpt2
#   llama3 qwen2.5 mistral gemma2 (defaults to all five). Env: PYTHON (default /opt/kiln-venv/bin/python),
#   ASSETS (default ../shared/assets), MB (default 10), REPEATS (default 3).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-tokenizer}"
shift || true
families=("$@")
[ ${#families[@]} -eq 0 ] && families=(gpt2 llama3 qwen2.5 mistral gemma2)
python="${PYTHON:-/opt/kiln-venv/bin/python}"
assets="${ASSETS:-$root/../shared/assets}"
mb="${MB:-10}"
repeats="${REPEATS:-3}"
declare -A dirs=([gpt2]=tokenizers/gpt2 [llama3]=tokenizers/llama3 [llama3.2]=tokenizers/llama3.2
  [qwen2.5]=tokenizers/qwen2.5 [mistral]=tokenizers/mistral-7b-instruct-v0.3 [gemma2]=tokenizers/gemma2
  [phi3]=tokenizers/phi3-mini)

ninja -C "$build" kiln_text kiln_base >/dev/null || echo "warning: ninja failed; using the libraries already in $build" >&2
bin="$build/bench_tokenizer"
# bench/ is not part of the CMake tree; link the benchmark against the built libraries directly.
"${CXX:-g++}" -O2 -std=c++20 -I"$root" "$root/bench/tokenizer/bench_tokenizer.cc" \
  "$build/runtime/text/libkiln_text.a" "$build/runtime/base/libkiln_base.a" \
  $(pkg-config --libs libpcre2-8 icu-uc) -lssl -lcrypto -o "$bin"

printf "%-9s %10s %10s %12s %12s %8s\n" family tokens "MB" "kiln MB/s" "HF MB/s" ratio
for fam in "${families[@]}"; do
  dir="$assets/${dirs[$fam]}"
  goldens="$root/tests/data/tokenizer/goldens_$fam.json"
  k=$("$bin" "$dir" "$goldens" "$mb" "$repeats")
  h=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$python" "$root/bench/tokenizer/bench_hf.py" "$dir" "$goldens" "$mb" "$repeats")
  "$python" - "$fam" "$k" "$h" <<'PY'
import json, sys
fam, k, h = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
same = k["tokens"] == h["tokens"] and k["checksum"] == h["checksum"]
print(f"{fam:<9} {k['tokens']:>10} {k['bytes']/1e6:>10.2f} {k['mb_per_s']:>12.2f} {h['mb_per_s']:>12.2f} "
      f"{k['mb_per_s']/h['mb_per_s']:>7.2f}x{'' if same else '  IDS DIFFER'}  (load {k['load_seconds']}s vs {h['load_seconds']}s, {h['impl']})")
PY
done
