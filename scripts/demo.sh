#!/usr/bin/env bash
# The main job on the embedded default model: builds kiln, compiles the committed tiny Llama
# fixture (made by tools/goldens/make_llama_goldens.py) into an artifact, inspects it, and
# generates from it. The README's first command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
KILN_BUILD_TARGETS=kiln "$root/scripts/build.sh"
build=${KILN_BUILD_DIR:-$root/build}
kiln="$build/tools/kiln/kiln"
model=${1:-$root/tests/data/models/tiny-llama}
out="$build/demo/$(basename "$model").kiln"
mkdir -p "$build/demo"
"$kiln" compile "$model" -o "$out" --max-batch 4 --max-seq-len 256
"$kiln" inspect "$out" --summary
"$kiln" generate "$out" --prompt-ids "1 17 42 99" --max-tokens 16
