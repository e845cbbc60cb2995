#!/usr/bin/env bash
# Runs test_ship.py with the venv from scripts/python-test-deps.sh; exits 77 (CTest skip) with a
# message when that venv lacks moto or the AWS CLI.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
python=${KILN_TEST_PYTHON:-${KILN_TEST_VENV:-$repo/.venv}/bin/python}
bin=$(dirname "$python")
if ! "$python" -c 'import moto, awscli' 2>/dev/null || [ ! -x "$bin/moto_server" ] || [ ! -x "$bin/aws" ]; then
  echo "skip: $python lacks moto[server] or awscli; run scripts/python-test-deps.sh"
  exit 77
fi
exec "$python" "$(dirname "$0")/test_ship.py" "$@"
