#!/usr/bin/env bash
# Builds kiln and runs every test: the command CI runs (.ci/run) and the README's second command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$@"
build=${KILN_BUILD_DIR:-$root/build}
# Under CI (CI=true) a missing test input is a failure, not a quiet skip of the tests needing it.
ci=false
case "${CI:-}" in true | 1 | yes) ci=true ;; esac
missing() {
  if [ "$ci" = true ]; then
    echo "error (CI): $1" >&2
    exit 1
  fi
  echo "note: $1"
}
if [ ! -d "$root/../shared/assets" ]; then
  missing "$root/../shared/assets is absent: tests labelled 'model' would skip"
fi
"$root/scripts/python-test-deps.sh" ||
  missing "the Python test clients did not install: the Python e2e tests would skip"
"$root/scripts/fetch-smollm2.sh" >/dev/null ||
  missing "SmolLM2-135M-Instruct could not be fetched: its tests would skip"
cd "$build"
# ctest hides why a test skipped: show the GPU tests' reasons first (they skip without a device).
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  echo "GPU tests (label gpu) skip on this machine; their reasons:"
  ctest -L gpu -V 2>&1 | grep -E "^[0-9]+: (no CUDA|.*Skipped$)" | sort -u || true
fi
ctest --output-on-failure -j "${KILN_TEST_JOBS:-$(nproc)}" --timeout 900
