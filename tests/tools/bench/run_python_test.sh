#!/usr/bin/env bash
# Runs one Python test of the benchmark tools (tools/bench) with the first interpreter that has
# what it needs; exits 77 (CTest skip) saying why when there is none.
# Usage: run_python_test.sh NEED SCRIPT [ARGS...]
#   NEED none:  $KILN_TEST_PYTHON, else Debian's python3 (compare.py, make_random_llama --dry-run).
#   NEED numpy: the first of $KILN_TEST_PYTHON, the test venv (scripts/python-test-deps.sh),
#               /opt/kiln-venv, Debian's python3 that imports numpy.
#   NEED torch: only $KILN_TEST_TORCH_PYTHON (torch + transformers + numpy): CI never runs torch,
#               so the transformers peer's test runs only when a developer asks for it.
set -uo pipefail
need=$1
script=$2
shift 2
repo=$(cd "$(dirname "$0")/../../.." && pwd)
# pyenv's shims may come first on PATH (docs/toolchain.md): prefer Debian's python3.
system=/usr/bin/python3
[ -x "$system" ] || system=$(command -v python3 || true)

case "$need" in
none)
  python=${KILN_TEST_PYTHON:-$system}
  ;;
numpy)
  python=""
  for candidate in "${KILN_TEST_PYTHON:-}" "${KILN_TEST_VENV:-$repo/.venv}/bin/python" \
    /opt/kiln-venv/bin/python "$system"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import numpy' 2>/dev/null; then
      python=$candidate
      break
    fi
  done
  if [ -z "$python" ]; then
    echo "skip: no python with numpy (tried \$KILN_TEST_PYTHON, the test venv, /opt/kiln-venv," \
      "$system); install numpy into one of them"
    exit 77
  fi
  ;;
torch)
  python=${KILN_TEST_TORCH_PYTHON:-}
  if [ -z "$python" ]; then
    echo "skip: needs torch; set KILN_TEST_TORCH_PYTHON to a python with torch, transformers and" \
      "numpy (e.g. /opt/kiln-venv/bin/python) to run it (CI never runs torch)"
    exit 77
  fi
  if ! "$python" -c 'import torch, transformers, numpy' 2>/dev/null; then
    echo "skip: $python cannot import torch, transformers and numpy"
    exit 77
  fi
  ;;
*)
  echo "run_python_test.sh: NEED must be none, numpy or torch, got '$need'" >&2
  exit 2
  ;;
esac
if [ -z "$python" ] || ! [ -x "$python" ]; then
  echo "skip: no python3 found (looked for '$python')"
  exit 77
fi
echo "python: $python ($("$python" --version 2>&1))"
exec "$python" "$script" "$@"
