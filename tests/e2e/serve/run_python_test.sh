#!/usr/bin/env bash
# Runs one serving e2e test script with the venv from scripts/python-test-deps.sh; exits 77 (CTest
# skip) with a message when that venv or the artifact is missing.
# Usage: run_python_test.sh SCRIPT --kiln KILN --work DIR --repo REPO --assets ASSETS
set -uo pipefail
script=$1
shift
repo=$(cd "$(dirname "$0")/../../.." && pwd)
python=${KILN_TEST_PYTHON:-${KILN_TEST_VENV:-$repo/.venv}/bin/python}
if ! "$python" -c 'import openai, requests' 2>/dev/null; then
  echo "skip: $python cannot import openai and requests; run scripts/python-test-deps.sh"
  exit 77
fi
exec "$python" "$script" "$@"
