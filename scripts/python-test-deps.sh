#!/usr/bin/env bash
# Creates the Python environment the end-to-end serving tests use (tests/e2e/serve): the official
# openai client and requests, from PyPI. Idempotent: does nothing when they already import.
# Usage: scripts/python-test-deps.sh [VENV_DIR]   (default: $KILN_TEST_VENV or <repo>/.venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${KILN_TEST_VENV:-$root/.venv}}
# pyenv's shims come first on PATH on some machines (TOOLCHAIN.md): use Debian's python3.
python=/usr/bin/python3
[ -x "$python" ] || python=python3

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import openai, requests' 2>/dev/null; then
  echo "python-test-deps: $venv has openai and requests"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'openai>=1.40,<3' 'requests>=2.28'
"$venv/bin/python" -c 'import openai, requests; print("python-test-deps: openai", openai.__version__, "requests", requests.__version__)'
