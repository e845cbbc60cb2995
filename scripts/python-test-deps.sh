#!/usr/bin/env bash
# Creates the Python environment the end-to-end tests use, from PyPI: the official openai client,
# huggingface_hub (its InferenceClient) and requests (tests/e2e/serve); moto's S3 server and the
# AWS CLI (tests/e2e/ship); numpy (tests/tools/bench: the random-weight model generator);
# tokenizers (tests/e2e: a GGUF's converted tokenizer.json read by Hugging Face tokenizers);
# jsonschema (tests/e2e/serve: structured outputs validated by the reference validator).
# Idempotent: does nothing when they already import.
# Usage: scripts/python-test-deps.sh [VENV_DIR]   (default: $KILN_TEST_VENV or <repo>/.venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${KILN_TEST_VENV:-$root/.venv}}
# pyenv's shims come first on PATH on some machines (docs/toolchain.md): use Debian's python3.
python=/usr/bin/python3
[ -x "$python" ] || python=python3

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import openai, huggingface_hub, requests, moto, awscli, numpy, tokenizers, jsonschema' 2>/dev/null &&
  [ -x "$venv/bin/moto_server" ] && [ -x "$venv/bin/aws" ]; then
  echo "python-test-deps: $venv has openai, huggingface_hub, requests, moto, awscli, numpy, tokenizers and jsonschema"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'openai>=1.40,<3' 'huggingface_hub>=0.24' \
  'requests>=2.28' 'moto[server]>=5,<6' 'awscli>=1.30,<2' 'numpy>=1.24' 'tokenizers>=0.20' \
  'jsonschema>=4.17'
"$venv/bin/python" -c 'import openai, huggingface_hub, requests, moto, awscli, numpy; print("python-test-deps: openai", openai.__version__, "huggingface_hub", huggingface_hub.__version__, "requests", requests.__version__, "moto", moto.__version__, "awscli", awscli.__version__, "numpy", numpy.__version__, "tokenizers", __import__("tokenizers").__version__, "jsonschema", __import__("importlib.metadata").metadata.version("jsonschema"))'
