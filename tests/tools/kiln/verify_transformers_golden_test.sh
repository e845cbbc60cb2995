#!/usr/bin/env bash
# tools/goldens/make_verify_golden.py on the committed tiny-llama fixture, then `kiln verify` of
# the fixture compiled in the same dtype against that fresh golden: fp32 (ids, a text prompt
# through the model's tokenizer and a prompts file) and bf16 must pass, another model must fail
# with exit 1.
# Usage: verify_transformers_golden_test.sh KILN REPO WORK_DIR
# Python: $KILN_TEST_TORCH_PYTHON (scripts/test.sh sets it from scripts/python-torch-deps.sh), else
# /opt/kiln-venv/bin/python. Without torch + transformers: skip (exit 77), except under CI=true,
# where that fails.
set -euo pipefail
kiln=$1
repo=$2
work=$3
python=${KILN_TEST_TORCH_PYTHON:-/opt/kiln-venv/bin/python}
if [ ! -x "$python" ] || ! "$python" -c 'import torch, transformers' 2>/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $python cannot import torch and transformers (CI=true; scripts/python-torch-deps.sh installs them)"
    exit 1
  fi
  echo "skip: $python cannot import torch and transformers (scripts/python-torch-deps.sh installs them)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
model=$repo/tests/data/models/tiny-llama
tool=$repo/tools/goldens/make_verify_golden.py

expect_exit() { # WANT COMMAND...: runs COMMAND, fails unless it exits WANT
  local want=$1 rc=0
  shift
  "$@" >"$work/out.txt" 2>&1 || rc=$?
  cat "$work/out.txt"
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: exit $rc, want $want: $*"
    exit 1
  fi
}

printf '%s\n' '{"prompt_ids": [1, 5, 480, 77]}' '{"prompt": "The bell rang."}' >"$work/prompts.jsonl"
expect_exit 0 "$python" "$tool" "$model" --prompt-ids "1; 1 17 300 42 511" \
  --prompt "Mira rang the bell." --prompts-file "$work/prompts.jsonl" \
  --out "$work/fp32/golden.json" --new-tokens 12 --threads 1
# The text prompt went through the fixture's tokenizer (tests/data/README.md's example).
grep -q '"prompt_ids": \[1, 315, 409, 263, 313, 16\]' "$work/fp32/golden.json" ||
  { echo "FAIL: 'Mira rang the bell.' is not [1, 315, 409, 263, 313, 16] in the golden"; exit 1; }
expect_exit 0 "$python" "$tool" "$model" --prompt-ids "1 17 300 42 511; 1" --dtype bf16 \
  --out "$work/bf16/golden.json" --new-tokens 12 --threads 1
ls "$work/bf16/golden.case0.logits.bf16" >/dev/null

expect_exit 0 "$kiln" compile "$model" -o "$work/fp32.kiln" --max-seq-len 64 --quiet
expect_exit 0 "$kiln" compile "$model" -o "$work/bf16.kiln" --dtype bf16 --max-seq-len 64 --quiet
expect_exit 0 "$kiln" compile "$repo/tests/data/models/tiny-llama-tied" -o "$work/tied.kiln" \
  --max-seq-len 64 --quiet

expect_exit 0 "$kiln" verify "$work/fp32.kiln" --golden "$work/fp32/golden.json"
grep -q "^verify: PASS (5 cases)$" "$work/out.txt" || { echo "FAIL: no 'verify: PASS (5 cases)'"; exit 1; }
expect_exit 0 "$kiln" verify "$work/bf16.kiln" --golden "$work/bf16/golden.json"
grep -q "^verify: PASS (2 cases)$" "$work/out.txt" || { echo "FAIL: no 'verify: PASS (2 cases)'"; exit 1; }
expect_exit 1 "$kiln" verify "$work/tied.kiln" --golden "$work/fp32/golden.json"
grep -q "^verify: FAIL (5 of 5 cases differ)$" "$work/out.txt" ||
  { echo "FAIL: no 'verify: FAIL (5 of 5 cases differ)'"; exit 1; }
# Bad input to the tool is an error (exit 2), naming the flag.
expect_exit 2 "$python" "$tool" "$model" --prompt-ids "1 x" --out "$work/bad.json"
grep -q "^make_verify_golden: error: --prompt-ids: '1 x' is not a list of token ids$" "$work/out.txt"
echo "PASS"
