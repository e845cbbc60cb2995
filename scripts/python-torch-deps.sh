#!/usr/bin/env bash
# Finds or creates a Python with torch and transformers (CPU use only) for the tests that make a
# golden with transformers on the spot (tests/tools/kiln/verify_transformers_golden_test.sh runs
# tools/goldens/make_verify_golden.py). Prints that Python's path on the last line.
# Order: $KILN_TEST_TORCH_PYTHON, /opt/kiln-venv (the golden makers' venv), else a venv in
# ~/.cache/kiln/torch-venv installed from PyPI once (PyPI's torch wheel brings the CUDA
# libraries: about 5.6 GB and several minutes; later runs reuse it).
# Usage: scripts/python-torch-deps.sh
set -euo pipefail
has_torch() { [ -x "$1" ] && "$1" -c 'import torch, transformers' 2>/dev/null; }
for candidate in "${KILN_TEST_TORCH_PYTHON:-}" /opt/kiln-venv/bin/python; do
  if [ -n "$candidate" ] && has_torch "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done
venv=${KILN_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/torch-venv}
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if ! has_torch "$venv/bin/python"; then
  echo "python-torch-deps: installing torch and transformers into $venv (once; ~5.6 GB)" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >&2
  # The versions tools/goldens' committed goldens record.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    'torch==2.15.0' 'transformers==5.24.0' 'safetensors>=0.4' >&2
fi
has_torch "$venv/bin/python"
echo "$venv/bin/python"
